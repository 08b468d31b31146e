ALTER TABLE dlock_fences ENGINE=InnoDB;
