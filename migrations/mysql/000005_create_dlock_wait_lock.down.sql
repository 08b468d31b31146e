-- Package advisory goes back to waiting with GET_LOCK and drawing the
-- token in a second statement.
DROP PROCEDURE IF EXISTS dlock_wait_lock;
