package state

import (
	"strconv"
	"unicode/utf8"
)

// MarshalJSON encodes the record exactly as encoding/json would from its
// field tags, without reflection. A process's first reflective encoding of
// a struct type builds that type's encoder, some 100 µs for Record, and ADD
// encodes one record per process. TestRecordJSONMatchesReflection keeps the
// two encodings byte for byte equal, new fields included.
func (r Record) MarshalJSON() ([]byte, error) {
	created, err := r.Created.MarshalJSON()
	if err != nil {
		return nil, err
	}
	o := jsonObject{b: make([]byte, 0, 640)}
	o.b = append(o.b, '{')
	o.int("version", r.Version)
	o.str("network", r.Network)
	o.str("containerID", r.ContainerID)
	o.str("ifName", r.IfName)
	o.str("netns", r.Netns)
	o.str("pci", r.PCI)
	if r.PF != "" {
		o.str("pf", r.PF)
	}
	o.int("vfIndex", r.VFIndex)
	o.str("altName", r.AltName)
	if r.AddedAltName {
		o.key("addedAltName")
		o.b = append(o.b, "true"...)
	}
	if r.FoundAs != "" {
		o.str("foundAs", r.FoundAs)
	}
	o.str("mac", r.MAC)
	o.int("mtu", r.MTU)
	o.str("linkLayer", r.LinkLayer)
	if r.NodeGUID != "" {
		o.str("nodeGUID", r.NodeGUID)
	}
	if len(r.RDMA) > 0 {
		o.key("rdma")
		o.b = append(o.b, '[')
		for i, s := range r.RDMA {
			if i > 0 {
				o.b = append(o.b, ',')
			}
			o.b = appendJSONString(o.b, s)
		}
		o.b = append(o.b, ']')
	}
	o.str("portPolicy", r.PortPolicy)
	o.str("guidPolicy", r.GUIDPolicy)
	o.str("sysfsRoot", r.SysfsRoot)
	o.key("created")
	o.b = append(o.b, created...)
	return append(o.b, '}'), nil
}

// jsonObject appends the members of a JSON object.
type jsonObject struct{ b []byte }

func (o *jsonObject) key(k string) {
	if len(o.b) > 1 {
		o.b = append(o.b, ',')
	}
	o.b = appendJSONString(o.b, k)
	o.b = append(o.b, ':')
}

func (o *jsonObject) str(k, v string) {
	o.key(k)
	o.b = appendJSONString(o.b, v)
}

func (o *jsonObject) int(k string, v int) {
	o.key(k)
	o.b = strconv.AppendInt(o.b, int64(v), 10)
}

// appendJSONString appends s as encoding/json writes a string: quotes and
// backslashes escaped, control characters as short or \u00XX escapes, <, >
// and & as \u003c, \u003e and \u0026, U+2028 and U+2029 escaped, and
// invalid UTF-8 replaced by U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
