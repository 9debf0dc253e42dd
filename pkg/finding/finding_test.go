package finding

import (
	"slices"
	"testing"
)

func TestSort(t *testing.T) {
	fs := []Finding{
		{Severity: Info, Check: "a", Subject: "x"},
		{Severity: Warning, Check: "b", Subject: "2"},
		{Severity: Error, Check: "z", Subject: "1"},
		{Severity: Warning, Check: "b", Subject: "1"},
		{Severity: Error, Check: "a", Subject: "9"},
	}
	bySev := slices.Clone(fs)
	SortBySeverity(bySev)
	want := []Finding{fs[2], fs[4], fs[1], fs[3], fs[0]} // stable within a severity
	if !slices.EqualFunc(bySev, want, Finding.Equal) {
		t.Errorf("SortBySeverity:\n got %v\nwant %v", bySev, want)
	}
	Sort(fs)
	want = []Finding{
		{Severity: Error, Check: "a", Subject: "9"},
		{Severity: Error, Check: "z", Subject: "1"},
		{Severity: Warning, Check: "b", Subject: "1"},
		{Severity: Warning, Check: "b", Subject: "2"},
		{Severity: Info, Check: "a", Subject: "x"},
	}
	if !slices.EqualFunc(fs, want, Finding.Equal) {
		t.Errorf("Sort:\n got %v\nwant %v", fs, want)
	}
	for i, s := range Severities {
		if s.Rank() != i {
			t.Errorf("%s ranks %d, want %d", s, s.Rank(), i)
		}
	}
}

func TestHasErrorsAndString(t *testing.T) {
	if HasErrors([]Finding{{Severity: Warning}, {Severity: Info}}) || !HasErrors([]Finding{{Severity: Info}, {Severity: Error}}) {
		t.Error("HasErrors does not say whether an error is among the findings")
	}
	f := Finding{Severity: Error, Check: CheckGUIDInvalid, Subject: "0000:18:00.2", Message: "GUID is zero", Remedy: "set it"}
	if got, want := f.String(), "error   0000:18:00.2: GUID is zero\n        fix: set it"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
