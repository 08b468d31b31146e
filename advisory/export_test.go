package advisory

// BoundsCalls is what l's backend tells dlock about its calls' deadlines
// (driver.DeadlineBound).
func BoundsCalls(l *Locker) bool { return l.b.BoundsCalls() }
