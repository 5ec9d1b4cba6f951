package offline

// WriteScript returns the source of write.lua, so that the load tool
// (internal/bench) can measure raw pipelined EVALSHAs of the same script the
// store runs, as a baseline.
func WriteScript() string { return writeLua }
