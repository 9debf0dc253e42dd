package main

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestRatioCI(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var a, b, same []time.Duration
	for range 200 {
		// Round-by-round load shared by both series, plus each one's noise.
		load := time.Duration(rng.IntN(2000)) * time.Microsecond
		base := 3*time.Millisecond + load
		b = append(b, base+time.Duration(rng.NormFloat64()*100)*time.Microsecond)
		a = append(a, base*11/10+time.Duration(rng.NormFloat64()*100)*time.Microsecond)
		same = append(same, base*11/10)
	}
	lo, hi := ratioCI(a, b, 1)
	want := ratio(median(a), median(b))
	if !(lo < want && want < hi) || hi-lo > 0.2 {
		t.Errorf("90%% CI %.3f–%.3f for a ratio of %.3f", lo, hi, want)
	}
	bases := make([]time.Duration, len(same))
	for i := range same {
		bases[i] = same[i] * 10 / 11
	}
	if lo, hi := ratioCI(same, bases, 1); math.Abs(lo-1.1) > 0.001 || math.Abs(hi-1.1) > 0.001 {
		t.Errorf("an exact 1.1× ratio got the CI %.4f–%.4f", lo, hi)
	}
	if lo, hi := ratioCI(nil, b, 1); lo != 0 || hi != 0 {
		t.Errorf("no samples: %v–%v, want 0–0", lo, hi)
	}
}

func TestDiffCI(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var a, b []time.Duration
	for range 200 {
		load := time.Duration(rng.IntN(2000)) * time.Microsecond
		base := 3*time.Millisecond + load
		b = append(b, base+time.Duration(rng.NormFloat64()*100)*time.Microsecond)
		a = append(a, base+800*time.Microsecond+time.Duration(rng.NormFloat64()*100)*time.Microsecond)
	}
	lo, hi := diffCI(a, b, 1)
	want := median(a) - median(b)
	if !(lo < want && want < hi) || hi-lo > time.Millisecond {
		t.Errorf("90%% CI %s–%s for a difference of %s", lo, hi, want)
	}
	if lo, hi := diffCI(nil, b, 1); lo != 0 || hi != 0 {
		t.Errorf("no samples: %v–%v, want 0–0", lo, hi)
	}
}
