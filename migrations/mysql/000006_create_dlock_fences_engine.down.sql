DROP PROCEDURE dlock_fences_engine;
