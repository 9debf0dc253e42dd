package bundle

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Read reads a bundle back: its files by name, and their names in the
// bundle's order (MANIFEST.json last). It refuses anything Write does not
// write (a link, a directory, a path that climbs out) and more than
// limit bytes of content.
func Read(r io.Reader, limit int64) (map[string][]byte, []string, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, nil, fmt.Errorf("not a gzip stream: %w", err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	var order []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, order, nil
		}
		if err != nil {
			return files, order, err
		}
		if h.Typeflag != tar.TypeReg || !validName(h.Name) {
			return files, order, fmt.Errorf("entry %q (type %c) is not a plain file of a bundle", h.Name, h.Typeflag)
		}
		if h.Size > limit {
			return files, order, fmt.Errorf("entry %s: %d bytes, over the %d left", h.Name, h.Size, limit)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return files, order, err
		}
		limit -= int64(len(data))
		files[h.Name] = data
		order = append(order, h.Name)
	}
}

// validName: relative, no element empty or climbing out.
func validName(name string) bool {
	if name == "" || name[0] == '/' {
		return false
	}
	for _, e := range strings.Split(name, "/") {
		if e == ".." || e == "" || e == "." {
			return false
		}
	}
	return true
}
