-- TPC-C's New-Order transaction, in pgbench's own tables (tools/seedbench/README.md):
-- a warehouse is a branch, a district a teller, an item's stock an account.
-- The district's next order number, then ten order lines, each taking from
-- one item's stock and recording the line.
\set w random(1, :scale)
\set d random(1, 10 * :scale)
\set i1 random(1, 100000 * :scale)
\set i2 random(1, 100000 * :scale)
\set i3 random(1, 100000 * :scale)
\set i4 random(1, 100000 * :scale)
\set i5 random(1, 100000 * :scale)
\set i6 random(1, 100000 * :scale)
\set i7 random(1, 100000 * :scale)
\set i8 random(1, 100000 * :scale)
\set i9 random(1, 100000 * :scale)
\set i10 random(1, 100000 * :scale)
\set q random(1, 10)
BEGIN;
UPDATE pgbench_tellers SET tbalance = tbalance + 1 WHERE tid = :d;
UPDATE pgbench_accounts SET abalance = abalance - :q WHERE aid IN (:i1, :i2, :i3, :i4, :i5, :i6, :i7, :i8, :i9, :i10);
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES
  (:d, :w, :i1, :q, CURRENT_TIMESTAMP), (:d, :w, :i2, :q, CURRENT_TIMESTAMP), (:d, :w, :i3, :q, CURRENT_TIMESTAMP),
  (:d, :w, :i4, :q, CURRENT_TIMESTAMP), (:d, :w, :i5, :q, CURRENT_TIMESTAMP), (:d, :w, :i6, :q, CURRENT_TIMESTAMP),
  (:d, :w, :i7, :q, CURRENT_TIMESTAMP), (:d, :w, :i8, :q, CURRENT_TIMESTAMP), (:d, :w, :i9, :q, CURRENT_TIMESTAMP),
  (:d, :w, :i10, :q, CURRENT_TIMESTAMP);
END;
