package config

// suggest returns the option closest to name if it is a near miss (a typo:
// at most a third of its letters differ, and at most 3), or "".
func suggest(name string, options []string) string {
	best, bestDist := "", 0
	for _, o := range options {
		d := editDistance(name, o)
		if d == 0 {
			continue
		}
		if best == "" || d < bestDist {
			best, bestDist = o, d
		}
	}
	if best == "" || bestDist > 3 || bestDist*3 > max(len(name), len(best)) {
		return ""
	}
	return best
}

// editDistance is the Damerau–Levenshtein distance (with adjacent
// transpositions, "regoin" → "region" is 1) between a and b.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
