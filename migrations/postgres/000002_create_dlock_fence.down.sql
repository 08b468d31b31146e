DROP SEQUENCE dlock_fence;
