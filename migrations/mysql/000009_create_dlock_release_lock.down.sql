DROP PROCEDURE IF EXISTS dlock_release_lock;
