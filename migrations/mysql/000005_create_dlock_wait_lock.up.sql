-- dlock_wait_lock is how package advisory's Lock takes a lock: it sets
-- the session's idle timeout (the lease's TTL while the lock is held),
-- waits in the server's queue for the lock (GET_LOCK) and, once granted,
-- records the holder in dlock_fences and draws its fencing token, all in
-- one call. The waiter learns of the grant and its token in the round
-- trip that waited; without the procedure it takes one more round trip
-- after every grant, while the other waiters wait.
-- The INSERT is a statement of its own, run only after the grant: the
-- MEMORY table is locked while it runs, never during the wait (see 000003).
-- The token is the hybrid clock of every other write to dlock_fences:
-- max(last + 1, the server's clock in µs).
-- It returns one row: the token, or NULL when the wait ended without the
-- lock (killed, or a year passed). SQL SECURITY INVOKER: it can do nothing
-- its caller could not do itself; the caller needs EXECUTE on it. Until
-- it can be called, Lock takes the three statements it replaces.
CREATE PROCEDURE dlock_wait_lock(
    IN lock_name      VARBINARY(64),
    IN fence_name     VARBINARY(255),
    IN holder         VARBINARY(255),
    IN idle_timeout_s INT
)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    SET SESSION wait_timeout = idle_timeout_s;
    IF GET_LOCK(lock_name, 31536000) = 1 THEN
        INSERT INTO dlock_fences (name, owner, session, token)
        VALUES (fence_name, holder, CONNECTION_ID(), LAST_INSERT_ID(CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)))
        ON DUPLICATE KEY UPDATE
            token = LAST_INSERT_ID(GREATEST(token + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED))),
            owner = VALUES(owner),
            session = VALUES(session);
        SELECT LAST_INSERT_ID() AS token;
    ELSE
        SELECT NULL AS token;
    END IF;
END;
