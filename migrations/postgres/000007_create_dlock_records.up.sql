-- dlock_records keeps one small record per name, written by a holder of
-- the name's lock (package tablelock or advisory) and fenced by its
-- token: what package election publishes about its leader (the term and
-- the leader's value) and what package schedlock remembers of a job's
-- last run (when it started, by this server's clock, and how long its
-- slot stays closed). A write whose token is smaller than the row's is
-- refused, so a holder that lost its lock never overwrites its
-- successor's record. since is when the row's current token first wrote
-- it, written_at its last write. One row per election or job name;
-- nothing else writes here.
CREATE TABLE dlock_records (
    name       varchar(255) PRIMARY KEY,
    token      bigint       NOT NULL CHECK (token > 0),
    value      bytea        NOT NULL,
    since      timestamptz  NOT NULL,
    written_at timestamptz  NOT NULL
);
