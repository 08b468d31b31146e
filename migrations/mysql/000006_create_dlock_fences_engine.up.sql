-- dlock_fences_engine puts dlock_fences, package advisory's holder rows,
-- in the engine that suits the server: MEMORY where the server writes no
-- binary log, InnoDB where it does. Migration 000007 calls it; a DBA
-- calls it again after turning the binary log on or off.
-- MEMORY spares every acquire a redo log flush, and loses nothing: a row
-- describes a GET_LOCK, which lives only as long as its session (see
-- 000003). But a MEMORY table is emptied when its server restarts, a
-- replica's too, while the primary keeps its rows: the primary's next
-- write to one of them reaches the replica as a row event for a row it
-- no longer has, and replication stops there (error 1032). A server with
-- a binary log, which any replicated one has, keeps the rows in InnoDB,
-- which survive a restart. A Locker logs a warning when it finds the rows
-- in memory on a server that writes a binary log.
-- It alters the table only when its engine is not the one chosen. SQL
-- SECURITY INVOKER: it can do nothing its caller could not do itself.
CREATE PROCEDURE dlock_fences_engine()
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    SET @dlock_fences_engine = IF(@@log_bin = 1, 'InnoDB', 'MEMORY');
    IF (SELECT ENGINE FROM information_schema.TABLES
        WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'dlock_fences') <> @dlock_fences_engine THEN
        SET @dlock_fences_alter = CONCAT('ALTER TABLE dlock_fences ENGINE=', @dlock_fences_engine);
        PREPARE dlock_fences_alter FROM @dlock_fences_alter;
        EXECUTE dlock_fences_alter;
        DEALLOCATE PREPARE dlock_fences_alter;
    END IF;
END;
