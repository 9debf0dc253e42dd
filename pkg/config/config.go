// Package config parses and validates the sriov-stable-cni network
// configuration. Parsing is pure: it applies defaults and checks every field
// without touching the file system, sysfs or netlink.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/containernetworking/cni/pkg/types"
)

// Defaults applied by Parse when a field is absent.
const (
	DefaultAltName = "vf-{pci}"
	// DefaultStateDir is on /run, a tmpfs: a record describes an attachment
	// to a pod netns, and no netns outlives the boot.
	DefaultStateDir   = "/run/cni/sriov-stable"
	DefaultSysfsRoot  = "/sys"
	DefaultPortWaitMs = 5000
	// MaxPortWaitMs bounds portWaitMs so a typo cannot hold a pod start for hours.
	MaxPortWaitMs = 120000
)

// LegacyStateDir is the default stateDir of releases before the records
// moved to /run; the plugin adopts the records it finds there (see
// state.Store.Adopt).
const LegacyStateDir = "/var/lib/cni/sriov-stable"

// Link layers accepted by linkLayer.
const (
	LinkLayerAuto       = "auto"
	LinkLayerInfiniBand = "infiniband"
	LinkLayerEthernet   = "ethernet"
)

// Policy says what a failed verification does.
type Policy string

// Policies accepted by guidPolicy and portPolicy.
const (
	PolicyRequire Policy = "require"
	PolicyWarn    Policy = "warn"
	PolicyIgnore  Policy = "ignore"
)

// RuntimeConfig holds the capability arguments a runtime (or Multus) passes.
type RuntimeConfig struct {
	DeviceID          string `json:"deviceID,omitempty"`
	CNIDeviceInfoFile string `json:"CNIDeviceInfoFile,omitempty"`
}

// NetConf is the plugin's configuration as read from stdin.
type NetConf struct {
	types.PluginConf

	DeviceID      string        `json:"deviceID,omitempty"`
	PCIBusID      string        `json:"pciBusID,omitempty"`
	RuntimeConfig RuntimeConfig `json:"runtimeConfig,omitempty"`

	AltName    string `json:"altName,omitempty"`
	LinkLayer  string `json:"linkLayer,omitempty"`
	GUIDPolicy Policy `json:"guidPolicy,omitempty"`
	PortPolicy Policy `json:"portPolicy,omitempty"`
	PortWaitMs *int   `json:"portWaitMs,omitempty"`
	MTU        int    `json:"mtu,omitempty"`
	StateDir   string `json:"stateDir,omitempty"`
	SysfsRoot  string `json:"sysfsRoot,omitempty"`
	LogFile    string `json:"logFile,omitempty"`
	LogLevel   string `json:"logLevel,omitempty"`

	// PCISource names the field the PCI address came from ("" when the
	// address is still to be read from the device info file or prevResult).
	PCISource string `json:"-"`
	// PCIAddress is the normalized VF address once known.
	PCIAddress string `json:"-"`
	// Level is LogLevel as a slog level.
	Level slog.Level `json:"-"`
	// PathError is set by ParseLenient when stateDir, sysfsRoot or logFile
	// is unusable or outside the allowed roots. Each such path then holds
	// its default (logFile none), which belongs to other configurations, so
	// DEL must not read or write state through them.
	PathError error `json:"-"`
}

// PortWait returns how long ADD may wait for the port to come up.
func (c *NetConf) PortWait() time.Duration {
	if c.PortWaitMs == nil {
		return DefaultPortWaitMs * time.Millisecond
	}
	return time.Duration(*c.PortWaitMs) * time.Millisecond
}

// Error is a configuration error: the field at fault and why.
type Error struct {
	Field  string
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason) }

func fieldErr(field, format string, a ...any) error {
	return &Error{Field: field, Reason: fmt.Sprintf(format, a...)}
}

// Parse decodes stdin, applies defaults and validates every field, the
// paths against roots. It does no I/O; the PCI address may still be
// unresolved (PCISource == "") when it must come from the device info file
// or prevResult.
func Parse(stdin []byte, roots Roots) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, decodeErr(err)
	}
	applyDefaults(conf)
	if err := validate(conf, roots); err != nil {
		return nil, err
	}
	return conf, nil
}

// ParseLenient decodes what it can for DEL: it never fails on a field ADD
// would reject, so a DEL with a bad config still cleans up. Only bytes that
// are not a JSON object at all yield an error. A path ADD would reject
// (outside roots included) sets PathError.
func ParseLenient(stdin []byte, roots Roots) (*NetConf, error) {
	conf, err := decodeSkippingBadFields(stdin)
	if err != nil {
		return nil, fieldErr("network configuration", "not valid JSON: %v", err)
	}
	applyDefaults(conf)
	for _, f := range pathFields(conf, roots) {
		if err := validatePath(f); err != nil {
			*f.val = f.fallback
			conf.PathError = errors.Join(conf.PathError, err)
		}
	}
	if validateLogLevel(conf) != nil {
		conf.Level = slog.LevelInfo
	}
	if addr, src, err := staticPCI(conf); err == nil {
		conf.PCIAddress, conf.PCISource = addr, src
	}
	return conf, nil
}

// decodeErr names the field whose value has the wrong JSON type, the
// embedded PluginConf's fields by their keys ("prevResult", not
// "PluginConf.prevResult"); any other error is about the whole input.
func decodeErr(err error) error {
	var typeErr *json.UnmarshalTypeError
	if !errors.As(err, &typeErr) || typeErr.Field == "" || typeErr.Type == nil {
		return fieldErr("network configuration", "not valid JSON for this plugin: %v", err)
	}
	return fieldErr(strings.TrimPrefix(typeErr.Field, "PluginConf."), "got a JSON %s, want %s",
		truncate(typeErr.Value, 64), jsonKind(typeErr.Type)) // Value holds a number's digits
}

// jsonKind names the JSON values a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "an integer"
}

// decodeSkippingBadFields decodes stdin into a NetConf, dropping each
// top-level field whose JSON type is wrong instead of losing them all.
func decodeSkippingBadFields(stdin []byte) (*NetConf, error) {
	if conf := (&NetConf{}); json.Unmarshal(stdin, conf) == nil {
		return conf, nil // the usual case: nothing to skip
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &fields); err != nil {
		return nil, err
	}
	// Each key on its own, so encoding/json matches it to its field as it
	// would in the whole document (case-insensitively, embedded structs
	// included).
	for key, value := range fields {
		one, err := json.Marshal(map[string]json.RawMessage{key: value})
		if err != nil || json.Unmarshal(one, &NetConf{}) != nil {
			delete(fields, key)
		}
	}
	data, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	conf := &NetConf{}
	if err := json.Unmarshal(data, conf); err != nil {
		return nil, err
	}
	return conf, nil
}

// HasPrevResult reports whether the configuration carries a prevResult (a
// JSON null counts as none), before or after version.ParsePrevResult moved
// it from RawPrevResult to PrevResult.
func (c *NetConf) HasPrevResult() bool {
	return c.RawPrevResult != nil || c.PrevResult != nil
}

func applyDefaults(c *NetConf) {
	if c.AltName == "" {
		c.AltName = DefaultAltName
	}
	if c.LinkLayer == "" {
		c.LinkLayer = LinkLayerAuto
	}
	if c.GUIDPolicy == "" {
		c.GUIDPolicy = PolicyRequire
	}
	if c.PortPolicy == "" {
		c.PortPolicy = PolicyRequire
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.SysfsRoot == "" {
		c.SysfsRoot = DefaultSysfsRoot
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
}

func validate(c *NetConf, roots Roots) error {
	if c.Name == "" {
		return fieldErr("name", "the network name is empty")
	}
	if err := ValidateKeyPart("name", c.Name); err != nil {
		return err
	}
	switch c.LinkLayer {
	case LinkLayerAuto, LinkLayerInfiniBand, LinkLayerEthernet:
	default:
		return fieldErr("linkLayer", "%q is not one of infiniband, ethernet, auto", c.LinkLayer)
	}
	if err := validatePolicy("guidPolicy", c.GUIDPolicy); err != nil {
		return err
	}
	if err := validatePolicy("portPolicy", c.PortPolicy); err != nil {
		return err
	}
	if c.PortWaitMs != nil && (*c.PortWaitMs < 0 || *c.PortWaitMs > MaxPortWaitMs) {
		return fieldErr("portWaitMs", "%d is outside 0..%d", *c.PortWaitMs, MaxPortWaitMs)
	}
	if c.MTU < 0 || c.MTU > 65535 {
		return fieldErr("mtu", "%d is outside 0..65535", c.MTU)
	}
	if err := validatePaths(c, roots); err != nil {
		return err
	}
	if err := validateLogLevel(c); err != nil {
		return err
	}
	if err := ValidateAltNameTemplate(c.AltName); err != nil {
		return err
	}
	addr, src, err := staticPCI(c)
	if err != nil {
		return err
	}
	c.PCIAddress, c.PCISource = addr, src
	return nil
}

func validatePolicy(field string, p Policy) error {
	switch p {
	case PolicyRequire, PolicyWarn, PolicyIgnore:
		return nil
	}
	return fieldErr(field, "%q is not one of require, warn, ignore", string(p))
}

// pathField is one of the configuration's paths with its allowed roots.
type pathField struct {
	name     string
	val      *string
	allowed  []string
	atRoot   bool     // the path may be a root itself
	fallback string   // what ParseLenient puts in place of a bad value
	ignored  []string // Roots.Ignored, for the message
}

func pathFields(c *NetConf, roots Roots) []pathField {
	return []pathField{
		{"stateDir", &c.StateDir, roots.StateDir, false, DefaultStateDir, roots.Ignored},
		{"sysfsRoot", &c.SysfsRoot, roots.SysfsRoot, true, DefaultSysfsRoot, roots.Ignored},
		{"logFile", &c.LogFile, roots.LogFile, false, "", roots.Ignored},
		{"runtimeConfig.CNIDeviceInfoFile", &c.RuntimeConfig.CNIDeviceInfoFile, roots.DeviceInfo, false, "", roots.Ignored},
	}
}

// validatePaths checks stateDir, sysfsRoot and logFile (see validatePath).
func validatePaths(c *NetConf, roots Roots) error {
	for _, f := range pathFields(c, roots) {
		if err := validatePath(f); err != nil {
			return err
		}
	}
	return nil
}

// validatePath checks one path and replaces it with its cleaned form, so a
// ".." that passed the check cannot lead elsewhere when the kernel
// resolves it. Cleaning is lexical: no symlink is read here (see Roots).
func validatePath(f pathField) error {
	if *f.val == "" {
		return nil
	}
	if !strings.HasPrefix(*f.val, "/") {
		return fieldErr(f.name, "%q is not an absolute path", truncate(*f.val, 64))
	}
	if strings.ContainsRune(*f.val, 0) || len(*f.val) > 4096 {
		return fieldErr(f.name, "path is not usable (NUL byte or longer than 4096)")
	}
	clean := filepath.Clean(*f.val)
	if f.name == "stateDir" && clean == "/" {
		return fieldErr("stateDir", "refusing to use / as the state directory")
	}
	if err := checkUnderRoots(f.name, *f.val, clean, f.allowed, f.atRoot, f.ignored); err != nil {
		return err
	}
	*f.val = clean
	return nil
}

func validateLogLevel(c *NetConf) error {
	levels := map[string]slog.Level{
		"error": slog.LevelError, "warn": slog.LevelWarn, "info": slog.LevelInfo, "debug": slog.LevelDebug,
	}
	l, ok := levels[c.LogLevel]
	if !ok {
		return fieldErr("logLevel", "%q is not one of error, warn, info, debug", c.LogLevel)
	}
	c.Level = l
	return nil
}

// staticPCI returns the PCI address from the config fields that carry it
// directly, in precedence order: deviceID, pciBusID, runtimeConfig.deviceID.
// The device info file and prevResult are read later, by the plugin.
func staticPCI(c *NetConf) (addr, source string, err error) {
	for _, f := range []struct{ name, val string }{
		{"deviceID", c.DeviceID},
		{"pciBusID", c.PCIBusID},
		{"runtimeConfig.deviceID", c.RuntimeConfig.DeviceID},
	} {
		if f.val == "" {
			continue
		}
		a, err := NormalizePCI(f.name, f.val)
		if err != nil {
			return "", "", err // a malformed field is an error even if an earlier one is set
		}
		if addr == "" {
			addr, source = a, f.name
		}
	}
	if addr != "" {
		return addr, source, nil
	}
	if f := c.RuntimeConfig.CNIDeviceInfoFile; f != "" && !strings.HasPrefix(f, "/") {
		return "", "", fieldErr("runtimeConfig.CNIDeviceInfoFile", "%q is not an absolute path", f)
	}
	return "", "", nil
}

// NormalizePCI checks the strict dddd:bb:dd.f form (hex digits; device
// 00-1f, function 0-7) and returns it in lower case. field names the config
// field for the error message.
func NormalizePCI(field, s string) (string, error) {
	bad := func(why string) error {
		return fieldErr(field, "%q is not a PCI address of the form dddd:bb:dd.f (%s)", truncate(s, 64), why)
	}
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return "", bad("wrong shape")
	}
	ls := strings.ToLower(s)
	for i, r := range ls {
		if i == 4 || i == 7 || i == 10 {
			continue
		}
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return "", bad("non-hex digit")
		}
	}
	var dev, fn int
	fmt.Sscanf(ls[8:10], "%x", &dev)
	fmt.Sscanf(ls[11:12], "%x", &fn)
	if dev > 0x1f {
		return "", bad("device above 1f")
	}
	if fn > 7 {
		return "", bad("function above 7")
	}
	return ls, nil
}

// ValidateKeyPart rejects values that cannot safely become part of a state
// file name or a log line: empty, too long, path separators, NUL, dot names
// and control characters.
func ValidateKeyPart(field, s string) error {
	switch {
	case s == "":
		return fieldErr(field, "is empty")
	case len(s) > 253:
		return fieldErr(field, "longer than 253 bytes")
	case s == "." || s == ".." || strings.Contains(s, ".."):
		return fieldErr(field, "%q contains '..'", s)
	case strings.ContainsAny(s, "/\\"):
		return fieldErr(field, "%q contains a path separator", truncate(s, 64))
	}
	if !utf8.ValidString(s) {
		return fieldErr(field, "%q is not valid UTF-8", truncate(s, 64))
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fieldErr(field, "%q contains a control character", truncate(s, 64))
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
