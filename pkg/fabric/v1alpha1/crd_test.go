package v1alpha1

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// openAPI is the part of an OpenAPI v3 schema the CRD uses.
type openAPI struct {
	Type       string             `json:"type"`
	Required   []string           `json:"required"`
	Properties map[string]openAPI `json:"properties"`
	Items      *openAPI           `json:"items"`
	Enum       []string           `json:"enum"`
}

type crd struct {
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind     string `json:"kind"`
			ListKind string `json:"listKind"`
			Plural   string `json:"plural"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Schema struct {
				OpenAPIV3Schema openAPI `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// The shipped CRD describes the Go type exactly: the same names, every
// field of spec and status (and no other) at the same place with a type
// its JSON fits, required where the Go field has no omitempty, and the
// finding kinds' enum equal to Kinds.
func TestCRDSchemaMatchesType(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/fabric/crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c crd
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	names := c.Spec.Names
	if c.Spec.Group != Group || names.Kind != Kind || names.ListKind != ListKind || names.Plural != Resource {
		t.Errorf("CRD names %s %s/%s/%s, want %s %s/%s/%s", c.Spec.Group, names.Kind, names.ListKind, names.Plural, Group, Kind, ListKind, Resource)
	}
	if len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Name != Version {
		t.Fatalf("CRD versions %+v, want one: %s", c.Spec.Versions, Version)
	}
	root := c.Spec.Versions[0].Schema.OpenAPIV3Schema
	st := reflect.TypeFor[NodeVFSet]()
	for _, field := range []string{"Spec", "Status"} {
		f, _ := st.FieldByName(field)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		compare(t, "."+name, f.Type, root.Properties[name])
	}
	kinds := root.Properties["status"].Properties["findings"].Items.Properties["kind"].Enum
	want := make([]string, len(Kinds))
	for i, k := range Kinds {
		want[i] = string(k)
	}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("CRD enum of finding kinds (-Kinds +CRD):\n%s", diff)
	}
}

var timeType = reflect.TypeFor[metav1.Time]()

// compare checks schema s against Go type typ at path.
func compare(t *testing.T, path string, typ reflect.Type, s openAPI) {
	t.Helper()
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := map[reflect.Kind]string{reflect.String: "string", reflect.Bool: "boolean", reflect.Int64: "integer",
		reflect.Slice: "array", reflect.Struct: "object"}[typ.Kind()]
	if typ == timeType {
		want = "string"
	}
	if s.Type != want {
		t.Errorf("%s: CRD type %q, Go %s wants %q", path, s.Type, typ, want)
		return
	}
	switch {
	case typ == timeType:
	case typ.Kind() == reflect.Slice:
		if s.Items == nil {
			t.Errorf("%s: CRD array without items", path)
			return
		}
		compare(t, path+"[]", typ.Elem(), *s.Items)
	case typ.Kind() == reflect.Struct:
		var fields, required []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields = append(fields, name)
			if !strings.Contains(opts, "omitempty") {
				required = append(required, name)
			}
			compare(t, path+"."+name, f.Type, s.Properties[name])
		}
		var inCRD []string
		for name := range s.Properties {
			inCRD = append(inCRD, name)
		}
		slices.Sort(fields)
		slices.Sort(inCRD)
		if diff := cmp.Diff(fields, inCRD); diff != "" {
			t.Errorf("%s: fields (-Go +CRD):\n%s", path, diff)
		}
		slices.Sort(required)
		req := slices.Sorted(slices.Values(s.Required))
		if diff := cmp.Diff(required, req, cmpEmpty); diff != "" {
			t.Errorf("%s: required fields (-Go without omitempty +CRD):\n%s", path, diff)
		}
	}
}

var cmpEmpty = cmp.Comparer(func(a, b []string) bool { return len(a) == 0 && len(b) == 0 || slices.Equal(a, b) })
