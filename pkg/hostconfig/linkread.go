package hostconfig

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sriov-stable-cni/sriov-stable-cni/internal/safefile"
)

// LinkNames is what one installed .link file names a PCI function.
type LinkNames struct {
	Name, AltName string
	File          string // the file's base name
}

// ReadLinkNames reads the systemd .link files in dir that match one PCI
// function by path, as Render writes them ([Match] Path=pci-<addr>,
// [Link] Name=, AlternativeName=), and returns their names by address.
// Files matching otherwise, or by a pattern, are not the function's own.
// The doctor's leftover check reads the host names a node was given so.
func ReadLinkNames(dir string) (map[string]LinkNames, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.link"))
	if err != nil {
		return nil, err
	}
	out := map[string]LinkNames{}
	var errs []error
	for _, f := range files {
		pci, n, err := readLinkFile(f)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			errs = append(errs, err)
		case pci != "" && n.Name != "":
			out[pci] = n
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("host names from .link files in %s: %w", dir, errors.Join(errs...))
	}
	return out, nil
}

// maxLinkFileSize caps the read of a .link file (hostconfig's are a few
// hundred bytes).
const maxLinkFileSize = 64 << 10

// readLinkFile reads one .link file: a regular file (a link to one is
// followed), at most maxLinkFileSize bytes. A link to /dev/null is a
// masked file, as systemd reads it: no names, no error.
func readLinkFile(path string) (pci string, n LinkNames, err error) {
	if target, err := os.Readlink(path); err == nil && target == os.DevNull {
		return "", LinkNames{}, nil
	}
	data, err := safefile.ReadFileFollow(path, maxLinkFileSize)
	if err != nil {
		return "", LinkNames{}, err
	}
	n.File = filepath.Base(path)
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		switch section + key {
		case "[Match]Path":
			addr, ok := strings.CutPrefix(value, "pci-")
			if !ok || strings.ContainsAny(addr, "*?[ ") {
				return "", LinkNames{}, nil
			}
			pci = addr
		case "[Match]MACAddress", "[Match]OriginalName", "[Match]Driver", "[Match]Type", "[Match]Property":
			return "", LinkNames{}, nil // not matched by the function alone
		case "[Link]Name":
			n.Name = value
		case "[Link]AlternativeName":
			n.AltName = value
		}
	}
	if err := sc.Err(); err != nil {
		return "", LinkNames{}, fmt.Errorf("read %s: %w", path, err)
	}
	return pci, n, nil
}
