-- dlock_release_lock is how package advisory's Unlock releases a lock: it
-- deletes the holder's row from dlock_fences and releases the GET_LOCK,
-- in one call. Before it, every name ever locked kept its row until
-- advisory.Prune ran, and a MEMORY dlock_fences filled up (error 1114,
-- "the table is full", after some 31,000 names at the default
-- max_heap_table_size) and stopped every Lock. Only the session's own row
-- is deleted (session = CONNECTION_ID()): a row another session wrote
-- since is left alone. Tokens do not need the row: each is a hybrid clock
-- read after the grant, larger than any earlier token of the name
-- provided the server's clock does not step back (see 000003).
-- It returns one row: RELEASE_LOCK's answer (1 released, 0 held by
-- another session, NULL not held). SQL SECURITY INVOKER: the caller needs
-- EXECUTE on it. Until it can be called, Unlock runs the two statements
-- it replaces.
CREATE PROCEDURE dlock_release_lock(
    IN lock_name  VARBINARY(64),
    IN fence_name VARBINARY(255)
)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DELETE FROM dlock_fences WHERE name = fence_name AND session = CONNECTION_ID();
    SELECT RELEASE_LOCK(lock_name) AS released;
END;
