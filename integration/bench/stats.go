package main

import (
	"math/rand/v2"
	"slices"
	"time"
)

// quantile returns the q-quantile (0..1) of ds by linear interpolation
// between the closest ranks; 0 for no samples.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(pos)
	if lo+1 >= len(s) {
		return s[len(s)-1]
	}
	frac := pos - float64(lo)
	return s[lo] + time.Duration(frac*float64(s[lo+1]-s[lo]))
}

func median(ds []time.Duration) time.Duration { return quantile(ds, 0.5) }

// diffs pairs two equally long series round by round: a[i] - b[i].
func diffs(a, b []time.Duration) []time.Duration {
	out := make([]time.Duration, min(len(a), len(b)))
	for i := range out {
		out[i] = a[i] - b[i]
	}
	return out
}

// ratio is a/b, or 0 when b is not positive (the report prints it as n/a).
func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// ratioCI is a 90% bootstrap confidence interval of median(a)/median(b)
// for two series measured round by round (see bootstrapCI). It says
// whether a ratio near a target is the plugin or the machine's noise.
func ratioCI(a, b []time.Duration, seed uint64) (lo, hi float64) {
	return bootstrapCI(a, b, seed, func(ma, mb time.Duration) (float64, bool) {
		r := ratio(ma, mb)
		return r, r > 0
	})
}

// diffCI is a 90% bootstrap confidence interval of median(a) - median(b).
func diffCI(a, b []time.Duration, seed uint64) (lo, hi time.Duration) {
	l, h := bootstrapCI(a, b, seed, func(ma, mb time.Duration) (float64, bool) { return float64(ma - mb), true })
	return time.Duration(l), time.Duration(h)
}

// bootstrapCI is a 90% bootstrap confidence interval of stat(median(a),
// median(b)) for two series measured round by round: each resample draws
// rounds with replacement and keeps a round's two samples together, so
// load that drifted over the run stays paired as it was measured. stat's
// false drops a resample (a ratio over nothing).
func bootstrapCI(a, b []time.Duration, seed uint64, stat func(ma, mb time.Duration) (float64, bool)) (lo, hi float64) {
	n := min(len(a), len(b))
	if n == 0 {
		return 0, 0
	}
	const resamples = 2000
	rng := rand.New(rand.NewPCG(seed, 11))
	stats := make([]float64, 0, resamples)
	ra, rb := make([]time.Duration, n), make([]time.Duration, n)
	for range resamples {
		for i := range n {
			k := rng.IntN(n)
			ra[i], rb[i] = a[k], b[k]
		}
		if v, ok := stat(median(ra), median(rb)); ok {
			stats = append(stats, v)
		}
	}
	if len(stats) == 0 {
		return 0, 0
	}
	slices.Sort(stats)
	return stats[len(stats)*5/100], stats[len(stats)*95/100]
}
