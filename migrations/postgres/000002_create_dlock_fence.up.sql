-- Fencing tokens of package advisory. One sequence for every lock name:
-- tokens strictly increase across holders of each name (and of all names).
-- nextval() is crash-safe here: when it logs ahead, the calling
-- transaction takes an xid, so its commit flushes the WAL before the token
-- reaches the client.
CREATE SEQUENCE dlock_fence AS bigint;
