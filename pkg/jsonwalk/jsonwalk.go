// Package jsonwalk decodes a JSON object key by key into values its caller
// names, as json.Unmarshal decodes into a struct, but without
// encoding/json first building the struct's field table by reflection: in
// a fresh process, as every plugin run is, that cost ~0.1 ms here for the
// network configuration and ~60 µs for a CNI result.
package jsonwalk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Object decodes data, one JSON object, key by key in document order: a
// repeated key's last value wins, keys field returns nil for are skipped,
// and each other value is decoded into what field returns for its key. A
// JSON null leaves everything as it is, as json.Unmarshal does; anything
// else but an object is an error naming typeName. A value of the wrong
// type is reported with its key.
func Object(data []byte, typeName string, field func(key string) any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
	case nil:
		return end(dec)
	default:
		return fmt.Errorf("json: cannot unmarshal %s into Go value of type %s", kind(tok), typeName)
	}
	if err := Fields(dec, field); err != nil {
		return err
	}
	return end(dec)
}

// Fields decodes the rest of an object whose opening brace dec has just
// returned, through its closing brace, as Object does.
func Fields(dec *json.Decoder, field func(key string) any) error {
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string) // Token fails on a key that is not a string
		if !ok {
			return fmt.Errorf("json: object key %v is not a string", tok)
		}
		if f := field(key); f != nil {
			if err := dec.Decode(f); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			continue
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	_, err := dec.Token() // the closing brace
	return err
}

// Entry is one JSON key of a T and the field of a T it decodes into.
type Entry[T any] struct {
	name  string
	field func(*T) any
}

// Key is the entry for name, decoded into what field returns.
func Key[T any](name string, field func(*T) any) Entry[T] { return Entry[T]{name, field} }

// Table is the JSON keys of a T, in the order given.
type Table[T any] struct {
	names []string
	keys  []Entry[T]
}

// NewTable makes a table of keys.
func NewTable[T any](keys ...Entry[T]) *Table[T] {
	t := &Table[T]{keys: keys, names: make([]string, len(keys))}
	for i, k := range keys {
		t.names[i] = k.name
	}
	return t
}

// Names lists the table's keys in order.
func (t *Table[T]) Names() []string { return t.names }

// Field is the field of v that key decodes into, matched by match; nil for
// a key the table does not hold.
func (t *Table[T]) Field(v *T, key string) any {
	if i := match(t.names, key); i >= 0 {
		return t.keys[i].field(v)
	}
	return nil
}

// match is the index of key in names as encoding/json matches a key to a
// struct field: exactly, else ignoring case; -1 when none matches.
func match(names []string, key string) int {
	for i, n := range names {
		if n == key {
			return i
		}
	}
	for i, n := range names {
		if strings.EqualFold(n, key) {
			return i
		}
	}
	return -1
}

// end fails on anything but white space after the top-level value.
func end(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("invalid character after top-level value")
		}
		return err
	}
	return nil
}

// kind names a JSON token's kind as encoding/json's errors do.
func kind(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		return "array"
	case string:
		return "string"
	case bool:
		return "bool"
	}
	return "number"
}
