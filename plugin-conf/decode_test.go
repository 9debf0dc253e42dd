package pluginconf

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// strictDecode decodes one YAML document into v the way the API server's
// strict field validation does: duplicate keys, unknown fields and fields
// whose case differs from the schema are errors.
func strictDecode(data []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	strictErrs, err := kjson.UnmarshalStrict(j, v)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if len(strictErrs) > 0 {
		return fmt.Errorf("strict decoding: %w", errors.Join(strictErrs...))
	}
	return nil
}

// readDoc reads a file that must hold exactly one YAML document: the
// decoders above read only the first one, so a second would go unchecked.
func readDoc(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs, content := 0, false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "---":
			if content {
				docs++
			}
			content = false
		case line != "" && !strings.HasPrefix(line, "#"):
			content = true
		}
	}
	if content {
		docs++
	}
	if docs != 1 {
		t.Fatalf("%s holds %d YAML documents; keep one per file so each is checked", path, docs)
	}
	return data
}

func mustDecode(t testing.TB, path string, v any) {
	t.Helper()
	if err := strictDecode(readDoc(t, path), v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestStrictDecodeRejects(t *testing.T) {
	type spec struct {
		HostNetwork bool `json:"hostNetwork"`
	}
	for name, doc := range map[string]string{
		"unknown field":   "hostNetwork: false\nhostNetwrk: true\n",
		"duplicate field": "hostNetwork: false\nhostNetwork: true\n",
		"wrong case":      "HostNetwork: true\n",
	} {
		var s spec
		if err := strictDecode([]byte(doc), &s); err == nil {
			t.Errorf("%s: %q decoded without error into %+v", name, doc, s)
		}
	}
	var s spec
	if err := strictDecode([]byte("hostNetwork: true\n"), &s); err != nil || !s.HostNetwork {
		t.Errorf("valid document: %+v, %v", s, err)
	}
}
