package state

import (
	"errors"
	"testing"
	"time"
)

// LoadFile reads one record by its file name, as a directory watch names
// it, and refuses names that are not a record file's.
func TestLoadFile(t *testing.T) {
	s := NewStore(t.TempDir())
	r := &Record{Network: "ib/a", ContainerID: "c1", IfName: "net1", Netns: "/run/netns/x", PCI: "0000:18:00.2", Created: time.Now().UTC()}
	if err := s.Save(r); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadFile(FileName(r.Key()))
	if err != nil || got.Key() != r.Key() || got.Netns != r.Netns {
		t.Errorf("LoadFile(%s) = %+v, %v", FileName(r.Key()), got, err)
	}
	if _, err := s.LoadFile("ib_c2_net1.json"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadFile of a file that is not there: %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"", ".", "..", "../x.json", "sub/x.json", ".tmp-123", "x.txt"} {
		if _, err := s.LoadFile(bad); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("LoadFile(%q) = %v, want an error naming it", bad, err)
		}
	}
}
