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
	return bootstrapCI(a, b, seed, nil, func(ra, rb []time.Duration) (float64, bool) {
		r := ratio(median(ra), median(rb))
		return r, r > 0
	})
}

// diffCI is a 90% bootstrap confidence interval of median(a) - median(b)
// for two series measured round by round.
func diffCI(a, b []time.Duration, seed uint64) (lo, hi time.Duration) {
	l, h := bootstrapCI(a, b, seed, nil, func(ra, rb []time.Duration) (float64, bool) {
		return float64(median(ra) - median(rb)), true
	})
	return time.Duration(l), time.Duration(h)
}

// bootstrapCI is a 90% bootstrap confidence interval of stat over
// resamples of a and b. Paired (unpaired nil): each resample draws rounds
// with replacement and keeps a round's two samples together, so load that
// drifted over the run stays paired as it was measured. Unpaired (b passed
// again as unpaired): each series is drawn on its own. stat's false drops a
// resample (a ratio over nothing).
func bootstrapCI(a, b []time.Duration, seed uint64, unpaired []time.Duration, stat func(ra, rb []time.Duration) (float64, bool)) (lo, hi float64) {
	na, nb := len(a), len(b)
	if unpaired == nil {
		na = min(na, nb)
		nb = na
	}
	if na == 0 || nb == 0 {
		return 0, 0
	}
	const resamples = 2000
	rng := rand.New(rand.NewPCG(seed, 11))
	stats := make([]float64, 0, resamples)
	ra, rb := make([]time.Duration, na), make([]time.Duration, nb)
	for range resamples {
		for i := range na {
			k := rng.IntN(na)
			ra[i] = a[k]
			if unpaired == nil {
				rb[i] = b[k]
			}
		}
		if unpaired != nil {
			for i := range nb {
				rb[i] = b[rng.IntN(nb)]
			}
		}
		if v, ok := stat(ra, rb); ok {
			stats = append(stats, v)
		}
	}
	if len(stats) == 0 {
		return 0, 0
	}
	slices.Sort(stats)
	return stats[len(stats)*5/100], stats[len(stats)*95/100]
}

// quantileCI is a 90% bootstrap confidence interval of the q-quantile of ds.
func quantileCI(ds []time.Duration, q float64, seed uint64) (lo, hi time.Duration) {
	l, h := bootstrapCI(ds, ds, seed, nil, func(a, _ []time.Duration) (float64, bool) { return float64(quantile(a, q)), len(a) > 0 })
	return time.Duration(l), time.Duration(h)
}

// quantileRatioCI is a 90% bootstrap confidence interval of
// quantile(a, q) / quantile(b, q) for two series not measured in pairs (the
// bursts of two chains): each resample draws each series on its own.
func quantileRatioCI(a, b []time.Duration, q float64, seed uint64) (lo, hi float64) {
	return bootstrapCI(a, b, seed, b, func(ra, rb []time.Duration) (float64, bool) {
		r := ratio(quantile(ra, q), quantile(rb, q))
		return r, r > 0
	})
}
