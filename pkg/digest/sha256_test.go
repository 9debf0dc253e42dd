package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// TestSum256KnownAnswers: FIPS 180-4's examples.
func TestSum256KnownAnswers(t *testing.T) {
	cases := map[string]string{
		"":    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"abc": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq": "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
	}
	for in, want := range cases {
		sum := Sum256([]byte(in))
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("Sum256(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestSum256AgreesWithCrypto: every length across the padding boundaries
// (55, 56, 63, 64 bytes mod 64) and some long inputs, against the
// standard library.
func TestSum256AgreesWithCrypto(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 1<<16)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	lengths := []int{1 << 16, 1<<16 - 1, 100_000 % (1 << 16)}
	for n := range 300 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		if got, want := Sum256(data[:n]), sha256.Sum256(data[:n]); got != want {
			t.Errorf("Sum256 of %d bytes = %x, want %x", n, got, want)
		}
	}
}
