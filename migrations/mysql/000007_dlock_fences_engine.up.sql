-- Puts dlock_fences in the engine that suits the server (see 000006):
-- InnoDB where the server writes a binary log, MEMORY where it does not.
CALL dlock_fences_engine();
