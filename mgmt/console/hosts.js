// Hosts and LUN maps: the initiator hosts and what each sees; add a host
// (with CHAP), map a volume to a host as a LUN, unmap.
//   ListHosts, ListMappings, ListVolumes of every pool (pools/-: the map
//   form's choices); CreateHost, CreateMapping, DeleteMapping.
import { call, list_all } from './api.js';
import { action, api_form, clear, h, short, show_notice, table } from './ui.js';

export const title = 'Hosts and LUN maps';

const words = (text) => text.split(/[\s,]+/).filter(Boolean);

export async function render(root, scope) {
  const hosts_section = h('section.card.wide', { id: 'hosts' }, h('h2', {}, 'Hosts'));
  const maps_section = h('section.card.wide', { id: 'mappings' }, h('h2', {}, 'LUN maps'));

  const host_form = api_form({
    title: 'Add a host',
    fields: [
      { name: 'id', label: 'Name', field: 'host_id', placeholder: 'db1' },
      { name: 'iqns', label: 'iSCSI initiators (IQNs)', field: 'host.iqns', placeholder: 'iqn.1993-08.org.debian:01:db1' },
      { name: 'nqns', label: 'NVMe hosts (NQNs)', field: 'host.nqns', placeholder: 'nqn.2014-08.org.nvmexpress:uuid:…' },
      { name: 'any', label: 'Every other initiator', field: 'host.any_initiator', type: 'checkbox' },
      { name: 'chap_user', label: 'CHAP user', field: 'host.chap_user' },
      { name: 'chap_secret', label: 'CHAP secret (12 to 255 bytes)', field: 'host.chap_secret', type: 'password', autocomplete: 'new-password' },
      { name: 'mutual_user', label: 'Mutual CHAP user', field: 'host.mutual_chap_user' },
      { name: 'mutual_secret', label: 'Mutual CHAP secret', field: 'host.mutual_chap_secret', type: 'password', autocomplete: 'new-password' },
    ],
    submit_label: 'Add host',
    submit: (v) => call('CreateHost', {
      hostId: v.id,
      host: { iqns: words(v.iqns), nqns: words(v.nqns), anyInitiator: v.any, chapUser: v.chap_user, chapSecret: v.chap_secret,
        mutualChapUser: v.mutual_user, mutualChapSecret: v.mutual_secret },
    }),
    done: async (host, form) => {
      form.reset();
      show_notice(`${host.name} added`);
      await refresh();
    },
  });
  host_form.id = 'add-host';

  const map_form = api_form({
    title: 'Map a volume',
    fields: [
      { name: 'volume', label: 'Volume', field: 'mapping.volume', options: [] },
      { name: 'host', label: 'Host', field: 'mapping.host', options: [] },
      { name: 'lun', label: 'LUN', field: 'mapping.lun', type: 'number', value: '0' },
      { name: 'id', label: 'Mapping name (default VOLUME-HOST)', field: 'mapping_id' },
    ],
    submit_label: 'Map',
    submit: (v) => call('CreateMapping', {
      mappingId: v.id || `${short(v.volume)}-${short(v.host)}`,
      mapping: { volume: v.volume, host: v.host, lun: Number(v.lun) },
    }),
    done: async (mapping, form) => {
      form.inputs.id.value = '';
      show_notice(`${mapping.volume} is LUN ${mapping.lun} of ${mapping.host}`);
      await refresh();
    },
  });
  map_form.id = 'map-volume';
  root.append(hosts_section, maps_section, h('div.forms', {}, h('section.card', {}, host_form), h('section.card', {}, map_form)));

  const choices = {};
  const set_choices = (select, values) => {
    const key = values.join(',');
    if (choices[select.name] === key) return;
    choices[select.name] = key;
    const chosen = select.value;
    clear(select, values.map((v) => h('option', { value: v }, v)));
    if (values.includes(chosen)) select.value = chosen;
  };

  const refresh = async () => {
    const [hosts, mappings, volumes] = await Promise.all([
      list_all('ListHosts', {}, 'hosts'),
      list_all('ListMappings', {}, 'mappings'),
      list_all('ListVolumes', { parent: 'pools/-' }, 'volumes'),
    ]);
    if (!scope.alive) return;
    clear(hosts_section, h('h2', {}, 'Hosts'), table(['Host', 'Initiators', 'CHAP', 'Mutual CHAP', 'LUNs'],
      hosts.map((x) => ({
        dataset: { name: x.name },
        cells: [short(x.name), x.anyInitiator ? '(every initiator no other host names)' : [...x.iqns, ...x.nqns].join(', ') || '-',
          x.chapUser ? `yes (${x.chapUser})` : 'no', x.mutualChapUser ? `yes (${x.mutualChapUser})` : 'no',
          mappings.filter((m) => m.host === x.name).map((m) => `${m.lun}: ${short(m.volume)}`).join(', ') || '-'],
      }))));
    clear(maps_section, h('h2', {}, 'LUN maps'), table(['Mapping', 'Volume', 'Host', 'LUN', ''],
      [...mappings].sort((a, b) => a.host.localeCompare(b.host) || a.lun - b.lun).map((m) => ({
        dataset: { name: m.name, volume: m.volume, host: m.host, lun: String(m.lun) },
        cells: [short(m.name), m.volume, short(m.host), m.lun,
          action('Unmap', async () => { await call('DeleteMapping', { name: m.name }); show_notice(`${m.name} unmapped`); await refresh(); },
            { confirm_text: `Unmap ${m.volume} from ${m.host}? Its sessions lose LUN ${m.lun} at once.`, kind: 'danger' })],
      }))));
    set_choices(map_form.inputs.volume, volumes.map((v) => v.name));
    set_choices(map_form.inputs.host, hosts.map((x) => x.name));
  };
  await scope.every(3000, refresh);
}
