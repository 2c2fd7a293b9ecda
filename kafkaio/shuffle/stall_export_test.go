package shuffle

// SetUnstall turns the reader's unstall safety net on or off (it is on by
// default), so that a test can see whether partitions stall without it.
func SetUnstall(r *Reader, on bool) { r.noUnstall = !on }
