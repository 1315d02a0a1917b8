// The `strata` commands on the array's resources: controllers, disks,
// groups, pools, volumes, hosts, mappings, operations, events, statistics
// and the version. Each verb is a CLI11 subcommand with its options; its
// action makes one API call (or pages through a list) and prints the
// result as client.cc does, in the formats the tests parse.
#include <chrono>
#include <memory>
#include <thread>

#include "tools/strata/cli.h"

namespace strata::cli {

namespace {

using S = v1::Array::Stub;

const std::vector<std::string> disk_h{
    "NAME",  "SLOT",  "KIND", "SIZE", "STATE", "GROUP#MEMBER", "READ ERRORS/TIMEOUTS",
    "MODEL", "SERIAL"},
    group_h{"NAME", "KIND", "STATE", "SIZE", "BACKGROUND", "REPAIRED BLOCKS", "MEMBERS"},
    pool_h{"NAME",        "GROUPS", "READ CACHE", "WRITE LOG",
           "WRITE CACHE", "OWNER",  "HOME",       "COLD COOLING"},
    volume_h{"NAME", "SIZE", "BLOCK", "AFFINITY", "WRITE CACHE", "SERIAL"},
    host_h{"NAME", "INITIATORS", "CHAP"}, map_h{"NAME", "VOLUME", "HOST", "LUN"},
    op_h{"NAME", "KIND", "RESOURCE", "STATE", "PROGRESS", "ERROR"},
    event_h{"TIME", "SEVERITY", "RESOURCE", "MESSAGE"},
    controller_h{"NAME", "STATE", "VERSION", "ISCSI PORTAL", "POOLS", "STARTED"};

// The values the options and positionals of one command line fill in: one
// command runs per process, so the commands share one set.
struct values {
  std::string name;                  // the NAME (or VOLUME) positional
  std::vector<std::string> members;  // group create's DISKs, pool create's GROUPs
  std::string size, pool, affinity, lun, host, mapping, chap, mutual_chap, limit, with, kind, to,
      cache, block_size, write_cache;
  std::vector<std::string> iqns, nqns;
  bool wait = false, any = false, no_chap = false, raid6 = false, raid1 = false, read_cache = false;
  // group create --ceph
  bool ceph = false, create_image = false;
  std::uint64_t cold_cooling_seconds = 0;  // pool update
  std::string monitors, ceph_user, keyring, rados_pool, image;
};

bool given(const CLI::App* command, const std::string& option) {
  return command->count(option) > 0;
}

// "USER:SECRET", or a usage error naming the option.
std::pair<std::string, std::string> credentials(const std::string& option,
                                                const std::string& value) {
  const auto colon = value.find(':');
  if (colon == std::string::npos || colon == 0) throw usage_error(option + " takes USER:SECRET");
  return {value.substr(0, colon), value.substr(colon + 1)};
}

v1::WriteCache write_cache_of(const std::string& text) {
  if (text == "write-back") return v1::WRITE_BACK;
  if (text == "write-through") return v1::WRITE_THROUGH;
  throw usage_error("--write-cache " + text + " is not write-back or write-through");
}

v1::Affinity affinity_of(const std::string& text) {
  if (text == "auto") return v1::AUTO;
  if (text == "performance") return v1::PERFORMANCE;
  if (text == "capacity") return v1::CAPACITY;
  if (text == "local") return v1::LOCAL;
  throw usage_error("--affinity is auto, performance, capacity or local");
}

// --limit N: 1 to 1000.
int limit_of(const std::string& text, int otherwise) {
  if (text.empty()) return otherwise;
  int limit = 0;
  try {
    std::size_t used = 0;
    limit = std::stoi(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (...) {
    throw usage_error("--limit takes a number");
  }
  if (limit < 1 || limit > 1000) throw usage_error("--limit is 1 to 1000");
  return limit;
}

CLI::App* noun(CLI::App& app, const std::string& name, const std::string& what) {
  CLI::App* n = app.add_subcommand(name, what);
  return n;
}

// A verb's NAME positional: required unless `optional`.
CLI::Option* name_of(CLI::App* verb, values& v, const std::string& what, bool optional = false) {
  CLI::Option* o = verb->add_option("NAME", v.name, what)->type_name("");
  if (!optional) o->required();
  return o;
}

}  // namespace

void add_resource_commands(CLI::App& app, context& ctx) {
  auto v = std::make_shared<values>();
  auto c = [&ctx]() -> client& { return ctx.connect(); };

  // An operation just started: printed at once, or with --wait when it
  // has ended (exit 1 unless it SUCCEEDED).
  auto started = [v, c](v1::Operation op) {
    while (v->wait && op.state() == v1::Operation::RUNNING) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      v1::GetRequest get;
      get.set_name(op.name());
      if (auto s = c().call(&S::GetOperation, get, op); !s.ok()) return fail(s);
    }
    c().print(op, op_h);
    return op.state() == v1::Operation::FAILED || op.state() == v1::Operation::CANCELLED
               ? exit_refused
               : 0;
  };
  auto wait_flag = [v](CLI::App* verb) {
    verb->add_flag("--wait", v->wait, "wait until the operation ends (exit 1 unless it succeeded)");
  };

  // --- controller
  CLI::App* controller =
      noun(app, "controller", "the controllers: their state, version, portal and pools");
  {
    CLI::App* list = controller->add_subcommand("list", "every controller");
    ctx.on(list, [c] {
      return c().list<v1::ListControllersResponse>(
          &S::ListControllers, [](auto& r) { return r.controllers(); }, controller_h);
    });
    CLI::App* show = controller->add_subcommand(
        "show", "one controller (default: the one answering, controllers/a)");
    name_of(show, *v, "the controller: a, b or controllers/a", true);
    ctx.on(show, [c, v] {
      return c().show<v1::Controller>(&S::GetController,
                                      resource("controllers/", v->name.empty() ? "a" : v->name),
                                      controller_h);
    });
    for (const char* verb_name : {"failover", "failback"}) {
      const bool failover = std::string(verb_name) == "failover";
      // Failover: the controller's pools move to its partner, and stay
      // there; failback: the pools whose home it is come back.
      CLI::App* verb = controller->add_subcommand(
          verb_name, failover ? "the controller's pools to its partner (an operation)"
                              : "the pools whose home the controller is back to it (an operation)");
      name_of(verb, *v, "the controller");
      wait_flag(verb);
      ctx.on(verb, [c, v, failover, started] {
        v1::GetRequest in;
        in.set_name(resource("controllers/", v->name));
        v1::Operation op;
        if (auto s = c().call(failover ? &S::FailoverController : &S::FailbackController, in, op);
            !s.ok())
          return fail(s);
        return started(op);
      });
    }
  }

  // --- disk
  CLI::App* disk = noun(app, "disk", "the drives: state, health, group membership, spares");
  {
    CLI::App* list = disk->add_subcommand("list", "every disk");
    ctx.on(list, [c] {
      return c().list<v1::ListDisksResponse>(
          &S::ListDisks, [](auto& r) { return r.disks(); }, disk_h);
    });
    CLI::App* show = disk->add_subcommand("show", "one disk");
    name_of(show, *v, "the disk: hdd-00 or disks/hdd-00");
    ctx.on(show,
           [c, v] { return c().show<v1::Disk>(&S::GetDisk, resource("disks/", v->name), disk_h); });

    CLI::App* add = disk->add_subcommand("add", "a simulated drive in a new slot");
    name_of(add, *v, "the new disk's id (hdd-10)");
    add->add_option("--kind", v->kind, "the drive's kind")->type_name("hdd|ssd")->required();
    add->add_option("--size", v->size, "its size: bytes, or with K, M, G, T (4G)")
        ->type_name("SIZE")
        ->required();
    ctx.on(add, [c, v] {
      if (v->kind != "hdd" && v->kind != "ssd")
        throw usage_error("disk add needs --kind hdd or ssd");
      const std::uint64_t bytes = parse_size(v->size);
      if (bytes == 0) throw usage_error("disk add needs --size SIZE (e.g. 4G)");
      v1::CreateDiskRequest in;
      in.set_disk_id(v->name);
      in.mutable_disk()->set_kind(v->kind == "hdd" ? v1::HDD : v1::SSD);
      in.mutable_disk()->set_size_bytes(bytes);
      return c().change<v1::CreateDiskRequest, v1::Disk>(&S::CreateDisk, in, disk_h);
    });

    for (const char* verb_name : {"fail", "erase"}) {
      const bool fail_it = std::string(verb_name) == "fail";
      CLI::App* verb = disk->add_subcommand(
          verb_name, fail_it ? "fail a member out of its group, as a dying drive"
                             : "wipe a replaced member's superblocks: blank again");
      name_of(verb, *v, "the disk");
      ctx.on(verb, [c, v, fail_it] {
        v1::GetRequest in;
        in.set_name(resource("disks/", v->name));
        return c().change<v1::GetRequest, v1::Disk>(fail_it ? &S::FailDisk : &S::EraseDisk, in,
                                                    disk_h);
      });
    }

    CLI::App* replace =
        disk->add_subcommand("replace", "rebuild a failed member onto another disk (an operation)");
    name_of(replace, *v, "the failed member");
    replace->add_option("--with", v->with, "a blank disk, or the same disk to rebuild it in place")
        ->type_name("DISK")
        ->required();
    wait_flag(replace);
    ctx.on(replace, [c, v, started] {
      v1::ReplaceDiskRequest in;
      in.set_name(resource("disks/", v->name));
      in.set_replacement(resource("disks/", v->with));
      v1::Operation op;
      if (auto s = c().call(&S::ReplaceDisk, in, op); !s.ok()) return fail(s);
      return started(op);
    });

    for (const char* verb_name : {"spare", "unspare"}) {
      const bool spare = std::string(verb_name) == "spare";
      CLI::App* verb =
          disk->add_subcommand(verb_name, spare ? "make a blank disk a hot spare for every group"
                                                : "a hot spare back to unused");
      name_of(verb, *v, "the disk");
      ctx.on(verb, [c, v, spare] {
        v1::UpdateDiskRequest in;
        in.mutable_disk()->set_name(resource("disks/", v->name));
        in.mutable_disk()->set_spare(spare);
        in.mutable_update_mask()->add_paths("spare");
        return c().change<v1::UpdateDiskRequest, v1::Disk>(&S::UpdateDisk, in, disk_h);
      });
    }
  }

  // --- group
  CLI::App* group = noun(app, "group", "the disk groups: RAID-6, RAID-1 and read caches");
  {
    CLI::App* list = group->add_subcommand("list", "every group");
    ctx.on(list, [c] {
      return c().list<v1::ListDiskGroupsResponse>(
          &S::ListDiskGroups, [](auto& r) { return r.groups(); }, group_h);
    });
    CLI::App* show = group->add_subcommand("show", "one group");
    name_of(show, *v, "the group: g1 or groups/g1");
    ctx.on(show, [c, v] {
      return c().show<v1::DiskGroup>(&S::GetDiskGroup, resource("groups/", v->name), group_h);
    });

    CLI::App* create = group->add_subcommand(
        "create", "a group over blank disks, or over an RBD image in a Ceph cluster (--ceph)");
    name_of(create, *v, "the new group's id (g7)");
    create->add_option("DISK", v->members, "its members, blank disks (none for --ceph)")
        ->type_name("");
    create->add_flag("--raid6", v->raid6, "a RAID-6 group (4 disks or more)");
    create->add_flag("--raid1", v->raid1, "a RAID-1 pair");
    create->add_flag("--read-cache", v->read_cache, "a read cache (SSDs)");
    create->add_flag("--ceph", v->ceph,
                     "the cold tier: an RBD image in a Ceph cluster (docs/ceph-tier.md)");
    create
        ->add_option("--monitors", v->monitors,
                     "--ceph: the monitors (127.0.0.1:3300, or [v2:A:3300],[v2:B:3300])")
        ->type_name("ADDRS");
    create->add_option("--user", v->ceph_user, "--ceph: the cephx user (default admin)")
        ->type_name("NAME");
    create
        ->add_option("--keyring", v->keyring,
                     "--ceph: the keyring file on the controller holding its key")
        ->type_name("FILE");
    create->add_option("--rados-pool", v->rados_pool, "--ceph: the image's RADOS pool")
        ->type_name("POOL");
    create->add_option("--image", v->image, "--ceph: the RBD image")->type_name("NAME");
    create->add_option("--size", v->size, "--ceph: the image's size (a multiple of 4M)")
        ->type_name("SIZE");
    create->add_flag("--create-image", v->create_image,
                     "--ceph: make the image (else it must exist, of --size)");
    create->add_option("--pool", v->pool, "the pool grows by it")->type_name("POOL");
    ctx.on(create, [c, v, create] {
      if (v->raid6 + v->raid1 + v->read_cache + v->ceph != 1) {
        throw usage_error("group create needs one of --raid6, --raid1, --read-cache, --ceph",
                          create);
      }
      if (v->ceph != v->members.empty())
        throw usage_error(v->ceph ? "a --ceph group has no disks" : "name the group's disks",
                          create);
      v1::CreateDiskGroupRequest in;
      in.set_group_id(v->name);
      in.mutable_group()->set_kind(v->raid6   ? v1::RAID6
                                   : v->raid1 ? v1::RAID1
                                   : v->ceph  ? v1::CEPH
                                              : v1::READ_CACHE);
      for (const std::string& d : v->members)
        in.mutable_group()->add_members(resource("disks/", d));
      if (v->ceph) {
        v1::CephImage& ceph = *in.mutable_group()->mutable_ceph();
        ceph.set_monitors(v->monitors);
        ceph.set_user(v->ceph_user);
        ceph.set_keyring_path(v->keyring);
        ceph.set_rados_pool(v->rados_pool);
        ceph.set_image(v->image);
        if (given(create, "--size") &&
            (ceph.set_size_bytes(parse_size(v->size)), ceph.size_bytes() == 0)) {
          throw usage_error("--size " + v->size + " is not a size", create);
        }
        ceph.set_create(v->create_image);
      }
      if (given(create, "--pool")) in.set_pool(resource("pools/", v->pool));
      return c().change<v1::CreateDiskGroupRequest, v1::DiskGroup>(&S::CreateDiskGroup, in,
                                                                   group_h);
    });

    CLI::App* scrub =
        group->add_subcommand("scrub", "check a RAID-6 group's parity (an operation)");
    name_of(scrub, *v, "the group");
    wait_flag(scrub);
    ctx.on(scrub, [c, v, started] {
      v1::GetRequest in;
      in.set_name(resource("groups/", v->name));
      v1::Operation op;
      if (auto s = c().call(&S::ScrubDiskGroup, in, op); !s.ok()) return fail(s);
      return started(op);
    });
  }

  // --- pool
  CLI::App* pool = noun(app, "pool", "the pools: groups, read cache, write log, owner");
  {
    CLI::App* list = pool->add_subcommand("list", "every pool");
    ctx.on(list, [c] {
      return c().list<v1::ListPoolsResponse>(
          &S::ListPools, [](auto& r) { return r.pools(); }, pool_h);
    });
    CLI::App* show = pool->add_subcommand("show", "one pool");
    name_of(show, *v, "the pool: p1 or pools/p1");
    ctx.on(show,
           [c, v] { return c().show<v1::Pool>(&S::GetPool, resource("pools/", v->name), pool_h); });

    CLI::App* create = pool->add_subcommand("create", "a pool over groups no pool has");
    name_of(create, *v, "the new pool's id (p2)");
    create->add_option("GROUP", v->members, "its groups")->type_name("")->required();
    create->add_option("--cache", v->cache, "a read-cache group")->type_name("GROUP");
    ctx.on(create, [c, v, create] {
      v1::CreatePoolRequest in;
      in.set_pool_id(v->name);
      for (const std::string& g : v->members) in.mutable_pool()->add_groups(resource("groups/", g));
      if (given(create, "--cache"))
        in.mutable_pool()->set_read_cache_group(resource("groups/", v->cache));
      return c().change<v1::CreatePoolRequest, v1::Pool>(&S::CreatePool, in, pool_h);
    });

    CLI::App* update = pool->add_subcommand("update",
                                            "a pool's write cache (a pool with a write log; "
                                            "write-through destages first), or its cold cooling");
    name_of(update, *v, "the pool");
    update->add_option("--write-cache", v->write_cache, "the pool's write cache mode")
        ->type_name("write-back|write-through");
    update
        ->add_option("--cold-cooling-seconds", v->cold_cooling_seconds,
                     "how long an extent stays idle before it moves to the pool's Ceph tier (0: "
                     "never; default 31 days)")
        ->type_name("SECONDS");
    ctx.on(update, [c, v, update] {
      v1::UpdatePoolRequest in;
      in.mutable_pool()->set_name(resource("pools/", v->name));
      if (given(update, "--write-cache")) {
        in.mutable_pool()->set_write_cache(write_cache_of(v->write_cache));
        in.mutable_update_mask()->add_paths("write_cache");
      }
      if (given(update, "--cold-cooling-seconds")) {
        in.mutable_pool()->set_cold_cooling_seconds(v->cold_cooling_seconds);
        in.mutable_update_mask()->add_paths("cold_cooling_seconds");
      }
      if (in.update_mask().paths().empty())
        throw usage_error("pool update: give --write-cache, --cold-cooling-seconds or both",
                          update);
      return c().change<v1::UpdatePoolRequest, v1::Pool>(&S::UpdatePool, in, pool_h);
    });

    // A planned move: the pool's home becomes the controller named, which
    // serves it once the operation has ended.
    CLI::App* move =
        pool->add_subcommand("move", "a planned move of the pool to a controller (an operation)");
    name_of(move, *v, "the pool");
    move->add_option("--to", v->to, "the controller that serves it from now on")
        ->type_name("a|b")
        ->required();
    wait_flag(move);
    ctx.on(move, [c, v, started] {
      v1::MovePoolRequest in;
      in.set_name(resource("pools/", v->name));
      in.set_to(resource("controllers/", v->to));
      v1::Operation op;
      if (auto s = c().call(&S::MovePool, in, op); !s.ok()) return fail(s);
      return started(op);
    });

    CLI::App* stats =
        pool->add_subcommand("stats", "a pool's statistics (rates over the last 5 s)");
    name_of(stats, *v, "the pool");
    ctx.on(stats, [c, v] {
      return c().show<v1::PoolStatistics>(
          &S::GetPoolStatistics, resource("pools/", v->name),
          {"POOL",          "SSD USED",       "HDD USED",   "CEPH USED",   "COMMITTED",
           "READ CACHE",    "READ IOPS",      "WRITE IOPS", "READ MB/S",   "WRITE MB/S",
           "WRITES",        "WRITE CACHE",    "DIRTY",      "LOG USED",    "DESTAGE MB/S",
           "WRITES LOGGED", "WRITES THROUGH", "DIRTY LOST", "PROMOTED",    "DEMOTED",
           "TO CEPH",       "FROM CEPH",      "MOVED",      "FAILED MOVES"});
    });
  }

  // --- volume
  CLI::App* volume =
      noun(app, "volume", "the volumes: size, block size, tier affinity, write cache");
  {
    // Every pool's volumes (the API's "pools/-"), each named with its
    // pool, or one pool's.
    CLI::App* list = volume->add_subcommand(
        "list", "the volumes of every pool (NAME says the pool), or of one pool");
    list->add_option("POOL", v->name, "only this pool's (p2 or pools/p2); the same as --pool")
        ->type_name("");
    list->add_option("--pool", v->pool, "only this pool's volumes")->type_name("POOL");
    ctx.on(list, [c, v, list] {
      if (!v->name.empty() && given(list, "--pool") &&
          resource("pools/", v->name) != resource("pools/", v->pool))
        throw usage_error(
            "volume list: POOL " + v->name + " and --pool " + v->pool + " name two pools: give one",
            list);
      const std::string one = given(list, "--pool") ? v->pool : v->name;
      return c().list<v1::ListVolumesResponse>(
          &S::ListVolumes, [](auto& r) { return r.volumes(); }, volume_h,
          one.empty() ? "pools/-" : resource("pools/", one));
    });
    CLI::App* show = volume->add_subcommand("show", "one volume");
    name_of(show, *v, "the volume: v1 (in p1) or pools/p2/volumes/v1");
    ctx.on(show,
           [c, v] { return c().show<v1::Volume>(&S::GetVolume, volume_name(v->name), volume_h); });

    CLI::App* create = volume->add_subcommand("create", "a thin volume");
    name_of(create, *v, "the new volume's id (v2)");
    create->add_option("--size", v->size, "its size: bytes, or with K, M, G, T (100G)")
        ->type_name("SIZE")
        ->required();
    create->add_option("--pool", v->pool, "its pool (default p1)")->type_name("POOL");
    create->add_option("--affinity", v->affinity, "the tier it prefers (default auto)")
        ->type_name("auto|performance|capacity");
    create->add_option("--block-size", v->block_size, "512: 512e, the default; 4096: 4Kn")
        ->type_name("512|4096");
    create
        ->add_option("--write-cache", v->write_cache,
                     "write-through: past the pool's write-back cache")
        ->type_name("write-back|write-through");
    ctx.on(create, [c, v, create] {
      const std::uint64_t bytes = parse_size(v->size);
      if (bytes == 0) throw usage_error("--size " + v->size + " is not a size (e.g. 100G)", create);
      v1::CreateVolumeRequest in;
      in.set_parent(resource("pools/", given(create, "--pool") ? v->pool : "p1"));
      in.set_volume_id(v->name);
      in.mutable_volume()->set_size_bytes(bytes);
      in.mutable_volume()->set_affinity(
          affinity_of(given(create, "--affinity") ? v->affinity : "auto"));
      if (given(create, "--write-cache"))
        in.mutable_volume()->set_write_cache(write_cache_of(v->write_cache));
      if (given(create, "--block-size")) {
        if (v->block_size != "512" && v->block_size != "4096") {
          throw usage_error("--block-size " + v->block_size + " is not 512 or 4096", create);
        }
        in.mutable_volume()->set_block_size_bytes(
            static_cast<std::uint32_t>(std::stoul(v->block_size)));
      }
      return c().change<v1::CreateVolumeRequest, v1::Volume>(&S::CreateVolume, in, volume_h);
    });

    CLI::App* update = volume->add_subcommand(
        "update", "a volume's size (volumes only grow), affinity or write cache");
    name_of(update, *v, "the volume");
    update->add_option("--size", v->size, "its new size")->type_name("SIZE");
    update->add_option("--affinity", v->affinity, "the tier it prefers")
        ->type_name("auto|performance|capacity");
    update
        ->add_option("--write-cache", v->write_cache,
                     "write-through: past the pool's write-back cache, whatever its mode")
        ->type_name("write-back|write-through");
    ctx.on(update, [c, v, update] {
      v1::UpdateVolumeRequest in;
      in.mutable_volume()->set_name(volume_name(v->name));
      if (given(update, "--size")) {
        const std::uint64_t bytes = parse_size(v->size);
        if (bytes == 0)
          throw usage_error("--size " + v->size + " is not a size (e.g. 200G)", update);
        in.mutable_volume()->set_size_bytes(bytes);
        in.mutable_update_mask()->add_paths("size_bytes");
      }
      if (given(update, "--affinity")) {
        in.mutable_volume()->set_affinity(affinity_of(v->affinity));
        in.mutable_update_mask()->add_paths("affinity");
      }
      if (given(update, "--write-cache")) {
        in.mutable_volume()->set_write_cache(write_cache_of(v->write_cache));
        in.mutable_update_mask()->add_paths("write_cache");
      }
      if (in.update_mask().paths().empty())
        throw usage_error("volume update needs --size, --affinity or --write-cache", update);
      return c().change<v1::UpdateVolumeRequest, v1::Volume>(&S::UpdateVolume, in, volume_h);
    });

    CLI::App* del = volume->add_subcommand("delete", "delete a volume (an operation)");
    name_of(del, *v, "the volume");
    wait_flag(del);
    ctx.on(del, [c, v, started] {
      v1::DeleteRequest in;
      in.set_name(volume_name(v->name));
      v1::Operation op;
      if (auto s = c().call(&S::DeleteVolume, in, op); !s.ok()) return fail(s);
      return started(op);
    });

    CLI::App* move = volume->add_subcommand(
        "move",
        "move a volume's extents to one tier (an operation; cancelling it puts the affinity back)");
    name_of(move, *v, "the volume");
    move->add_option("--to", v->to, "the tier")->type_name("capacity|performance")->required();
    wait_flag(move);
    ctx.on(move, [c, v, move, started] {
      if (v->to != "capacity" && v->to != "performance")
        throw usage_error("volume move needs --to capacity or --to performance", move);
      v1::MoveVolumeRequest in;
      in.set_name(volume_name(v->name));
      in.set_affinity(v->to == "capacity" ? v1::CAPACITY : v1::PERFORMANCE);
      v1::Operation op;
      if (auto s = c().call(&S::MoveVolume, in, op); !s.ok()) return fail(s);
      return started(op);
    });

    CLI::App* stats =
        volume->add_subcommand("stats", "a volume's statistics (rates over the last 5 s)");
    name_of(stats, *v, "the volume");
    ctx.on(stats, [c, v] {
      return c().show<v1::VolumeStatistics>(
          &S::GetVolumeStatistics, volume_name(v->name),
          {"VOLUME", "READ IOPS", "WRITE IOPS", "READ MB/S", "WRITE MB/S", "READ MS", "WRITE MS",
           "READ MS BY TIER (MEAN/P99)", "CACHE HITS", "SSD READS", "CEPH READS", "ALLOCATED",
           "ON SSD", "ON HDD", "IN CEPH", "WRITE CACHE", "DIRTY", "LOST"});
    });
  }

  // --- host
  CLI::App* host = noun(app, "host", "the hosts: their initiators (IQNs, NQNs) and CHAP");
  {
    CLI::App* list = host->add_subcommand("list", "every host");
    ctx.on(list, [c] {
      return c().list<v1::ListHostsResponse>(
          &S::ListHosts, [](auto& r) { return r.hosts(); }, host_h);
    });
    CLI::App* show = host->add_subcommand("show", "one host (its secrets are never shown)");
    name_of(show, *v, "the host: db1 or hosts/db1");
    ctx.on(show,
           [c, v] { return c().show<v1::Host>(&S::GetHost, resource("hosts/", v->name), host_h); });

    for (const char* verb_name : {"add", "update"}) {
      const bool add = std::string(verb_name) == "add";
      CLI::App* verb =
          host->add_subcommand(verb_name, add ? "a host" : "a host's initiators or CHAP");
      name_of(verb, *v, add ? "the new host's id (db1)" : "the host");
      verb->add_option("--iqn", v->iqns, "an iSCSI initiator's name (repeat for more)")
          ->type_name("IQN")
          ->allow_extra_args(false);
      verb->add_option("--nqn", v->nqns, "an NVMe host's NQN (repeat for more)")
          ->type_name("NQN")
          ->allow_extra_args(false);
      verb->add_flag("--any", v->any, "every initiator");
      verb->add_option("--chap", v->chap, "the CHAP the host logs in with")
          ->type_name("USER:SECRET");
      verb->add_option("--mutual-chap", v->mutual_chap, "the CHAP the array answers with")
          ->type_name("USER:SECRET");
      if (!add) verb->add_flag("--no-chap", v->no_chap, "no CHAP any more");
      ctx.on(verb, [c, v, verb, add] {
        v1::Host h;
        google::protobuf::FieldMask mask;
        if (given(verb, "--iqn")) {
          for (const std::string& iqn : v->iqns) h.add_iqns(iqn);
          mask.add_paths("iqns");
        }
        if (given(verb, "--nqn")) {
          for (const std::string& nqn : v->nqns) h.add_nqns(nqn);
          mask.add_paths("nqns");
        }
        if (v->any) {
          h.set_any_initiator(true);
          mask.add_paths("any_initiator");
        }
        const bool chap = given(verb, "--chap");
        if (chap && v->no_chap) throw usage_error("--chap or --no-chap, not both", verb);
        if (chap || v->no_chap) {
          if (chap) {
            const auto [user, secret] = credentials("--chap", v->chap);
            h.set_chap_user(user);
            h.set_chap_secret(secret);
          }
          for (const char* p :
               {"chap_user", "chap_secret", "mutual_chap_user", "mutual_chap_secret"})
            mask.add_paths(p);
        }
        if (given(verb, "--mutual-chap")) {
          const auto [user, secret] = credentials("--mutual-chap", v->mutual_chap);
          h.set_mutual_chap_user(user);
          h.set_mutual_chap_secret(secret);
          if (!chap) {
            mask.add_paths("mutual_chap_user");
            mask.add_paths("mutual_chap_secret");
          }
        }
        if (add) {
          v1::CreateHostRequest in;
          in.set_host_id(v->name);
          *in.mutable_host() = h;
          return c().change<v1::CreateHostRequest, v1::Host>(&S::CreateHost, in, host_h);
        }
        if (mask.paths().empty())
          throw usage_error(
              "host update needs --iqn, --nqn, --any, --chap, --no-chap or --mutual-chap", verb);
        v1::UpdateHostRequest in;
        h.set_name(resource("hosts/", v->name));
        *in.mutable_host() = h;
        *in.mutable_update_mask() = mask;
        return c().change<v1::UpdateHostRequest, v1::Host>(&S::UpdateHost, in, host_h);
      });
    }
  }

  // Deletes answer Empty: "NAME deleted", or {} with --json.
  auto deleted = [c, &ctx](bool host_delete, const std::string& name) {
    v1::DeleteRequest in;
    in.set_name(name);
    google::protobuf::Empty out;
    if (auto s =
            host_delete ? c().call(&S::DeleteHost, in, out) : c().call(&S::DeleteMapping, in, out);
        !s.ok())
      return fail(s);
    if (!ctx.as_json) std::printf("%s deleted\n", in.name().c_str());
    if (ctx.as_json) std::printf("{}\n");
    return 0;
  };
  {
    CLI::App* del = host->add_subcommand("delete", "delete a host (it may have no LUNs mapped)");
    name_of(del, *v, "the host");
    ctx.on(del, [v, deleted] { return deleted(true, resource("hosts/", v->name)); });
  }

  // --- map: `map VOLUME --lun N` maps; `map list` and `map show` read.
  CLI::App* map = noun(
      app, "map",
      "map a volume as a LUN (map VOLUME --lun N), or read the mappings (map list, map show NAME)");
  {
    map->add_option("VOLUME", v->name, "the volume to map: v1 or pools/p2/volumes/v1")
        ->type_name("");
    map->add_option("--lun", v->lun, "the LUN number")->type_name("N");
    map->add_option("--host", v->host, "the host that sees it (default all: every initiator)")
        ->type_name("HOST");
    map->add_option("--name", v->mapping, "the mapping's id (default VOLUME-HOST)")
        ->type_name("NAME");
    ctx.on(map, [c, v, map] {
      if (v->name.empty()) throw usage_error("map needs a VOLUME", map);
      if (!given(map, "--lun")) throw usage_error("map needs --lun", map);
      v1::CreateMappingRequest in;
      const std::string vol = volume_name(v->name);
      const std::string h = resource("hosts/", given(map, "--host") ? v->host : "all");
      // By default a mapping is named for its volume and host: "v2-h1".
      in.set_mapping_id(given(map, "--name")
                            ? v->mapping
                            : vol.substr(vol.rfind('/') + 1) + "-" + h.substr(h.rfind('/') + 1));
      in.mutable_mapping()->set_volume(vol);
      in.mutable_mapping()->set_host(h);
      try {
        in.mutable_mapping()->set_lun(static_cast<std::uint32_t>(std::stoul(v->lun)));
      } catch (...) {
        throw usage_error("--lun takes a number", map);
      }
      return c().change<v1::CreateMappingRequest, v1::Mapping>(&S::CreateMapping, in, map_h);
    });
    CLI::App* list = map->add_subcommand("list", "every mapping");
    ctx.on(list, [c] {
      return c().list<v1::ListMappingsResponse>(
          &S::ListMappings, [](auto& r) { return r.mappings(); }, map_h);
    });
    CLI::App* show = map->add_subcommand("show", "one mapping");
    show->add_option("MAPPING", v->mapping, "the mapping: v1-all or mappings/v1-all")
        ->type_name("")
        ->required();
    ctx.on(show, [c, v] {
      return c().show<v1::Mapping>(&S::GetMapping, resource("mappings/", v->mapping), map_h);
    });
  }
  {
    CLI::App* unmap = noun(app, "unmap", "delete a mapping");
    unmap->add_option("NAME", v->name, "the mapping: v3-db1 or mappings/v3-db1")
        ->type_name("")
        ->required();
    ctx.on(unmap, [v, deleted] { return deleted(false, resource("mappings/", v->name)); });
  }

  // --- op
  CLI::App* op =
      noun(app, "op", "the operations: deletes, moves, rebuilds, scrubs, with their progress");
  {
    CLI::App* list = op->add_subcommand("list", "every operation");
    ctx.on(list, [c] {
      return c().list<v1::ListOperationsResponse>(
          &S::ListOperations, [](auto& r) { return r.operations(); }, op_h);
    });
    CLI::App* show = op->add_subcommand("show", "one operation");
    name_of(show, *v, "the operation: op-3 or operations/op-3");
    ctx.on(show, [c, v] {
      return c().show<v1::Operation>(&S::GetOperation, resource("operations/", v->name), op_h);
    });
    CLI::App* cancel = op->add_subcommand("cancel", "cancel a running operation");
    name_of(cancel, *v, "the operation");
    ctx.on(cancel, [c, v] {
      v1::GetRequest in;
      in.set_name(resource("operations/", v->name));
      return c().change<v1::GetRequest, v1::Operation>(&S::CancelOperation, in, op_h);
    });
  }

  // --- events
  {
    CLI::App* events = noun(app, "events", "the event log, newest first");
    events->add_option("--limit", v->limit, "how many (1 to 1000; default 50)")->type_name("N");
    ctx.on(events, [c, v, &ctx] {
      const int limit = limit_of(v->limit, 50);
      v1::ListRequest in;
      in.set_page_size(limit);
      v1::ListEventsResponse out;
      if (auto s = c().call(&S::ListEvents, in, out); !s.ok()) return fail(s);
      std::vector<std::vector<std::string>> rows;
      std::string objects;
      for (const v1::Event& e : out.events()) {
        rows.push_back(row(e));
        objects += (objects.empty() ? "" : ",") + json(e);
      }
      if (ctx.as_json) {
        std::printf("[%s]\n", objects.c_str());
      } else {
        table(event_h, rows);
      }
      return 0;
    });
  }

  // --- version: the array's (--version is the CLI's own).
  {
    CLI::App* ver = noun(app, "version", "the array's version and the controller answering");
    ctx.on(ver, [c, &ctx] {
      v1::GetVersionResponse out;
      if (auto s = c().call(&S::GetVersion, v1::GetVersionRequest{}, out); !s.ok()) return fail(s);
      if (ctx.as_json) {
        std::printf("%s\n", json(out).c_str());
      } else {
        std::printf("strata %s, controller %s\n", out.version().c_str(), out.controller().c_str());
      }
      return 0;
    });
  }
}

// heat top and heat list: the current heat of a volume's extents.
void add_heat_table_commands(CLI::App* heat, context& ctx) {
  auto v = std::make_shared<values>();
  for (const char* verb_name : {"top", "list"}) {
    const bool top = std::string(verb_name) == "top";
    CLI::App* verb = heat->add_subcommand(
        verb_name, top ? "a volume's hottest extents first (decayed counts)"
                       : "every extent of a volume, in order (decayed counts)");
    verb->add_option("VOLUME", v->name, "the volume: v1 or pools/p2/volumes/v1")
        ->type_name("")
        ->required();
    // heat list took --limit too before CLI11 (scripts pass it), checked
    // and ignored: the list is every extent.
    verb->add_option("--limit", v->limit,
                     top ? "how many (1 to 1000; default 20)"
                         : "accepted (1 to 1000) and ignored: the list is every extent")
        ->type_name("N");
    ctx.on(verb, [&ctx, v, top] {
      const int limit = limit_of(v->limit, 20);
      client& c = ctx.connect();
      v1::ListHeatRequest in;
      in.set_volume(volume_name(v->name));
      in.set_hottest_first(top);
      in.set_page_size(top ? limit : 1000);
      std::vector<std::vector<std::string>> rows;
      std::string objects;
      for (;;) {
        v1::ListHeatResponse out;
        if (auto s = c.call(&S::ListHeat, in, out); !s.ok()) return fail(s);
        for (const v1::ExtentHeat& h : out.extents()) {
          rows.push_back(row(h));
          objects += (objects.empty() ? "" : ",") + json(h);
        }
        if (top || out.next_page_token().empty()) break;
        in.set_page_token(out.next_page_token());
      }
      if (ctx.as_json) {
        std::printf("[%s]\n", objects.c_str());
      } else {
        table({"EXTENT", "OFFSET", "READS", "WRITES", "BYTES", "TIER", "GROUP"},
              rows);  // decayed counts
      }
      return 0;
    });
  }
}

}  // namespace strata::cli
