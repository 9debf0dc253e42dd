// Package jsonwalktest checks a key-by-key decoder against json.Unmarshal,
// for the tests and fuzz targets of the packages that use jsonwalk.
package jsonwalktest

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// AgreesWithUnmarshal fails t unless decode accepts in exactly when
// json.Unmarshal does, and then fills a value from fresh just as it.
func AgreesWithUnmarshal[T any](t testing.TB, in []byte, fresh func() *T, decode func([]byte, *T) error) {
	t.Helper()
	want, got := fresh(), fresh()
	werr := json.Unmarshal(in, want)
	gerr := decode(in, got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: decoder error %v, json.Unmarshal error %v", in, gerr, werr)
	}
	if werr != nil {
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%q: decoder differs from json.Unmarshal (-Unmarshal +decoder):\n%s", in, diff)
	}
}
