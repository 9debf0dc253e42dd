package kubecluster

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s holds no PEM certificate", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cert
}

// TestPKIChainsAndNames: the serving certificate chains to the CA for
// every name a client dials (kubectl and the components the node IP, the
// in-cluster client the kubernetes Service's ClusterIP and DNS names) and
// for no other; the client certificate chains for client use only, in
// system:masters; each key is its certificate's, the service account key
// pair is one; the kubeconfig names the server, the CA and the client
// pair; keys are readable by their owner alone.
func TestPKIChainsAndNames(t *testing.T) {
	dir := t.TempDir()
	const server = "https://192.0.2.10:6443"
	p, err := newPKI(dir, server)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, p.CA))
	verify := func(c *x509.Certificate, name string, usage x509.ExtKeyUsage) error {
		_, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}})
		return err
	}
	serving := readCert(t, p.ServerCert)
	for _, name := range []string{"192.0.2.10", "198.19.0.1", "127.0.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost"} {
		if err := verify(serving, name, x509.ExtKeyUsageServerAuth); err != nil {
			t.Errorf("the serving certificate does not verify for %s: %v", name, err)
		}
	}
	for _, name := range []string{"198.19.0.10", "kubernetes.default.svc.cluster.local.example"} {
		if verify(serving, name, x509.ExtKeyUsageServerAuth) == nil {
			t.Errorf("the serving certificate verifies for %s, a name it must not hold", name)
		}
	}
	client := readCert(t, p.ClientCert)
	if err := verify(client, "", x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("the client certificate does not verify for client use: %v", err)
	}
	if verify(client, "", x509.ExtKeyUsageServerAuth) == nil {
		t.Error("the client certificate verifies for serving")
	}
	if !slices.Equal(client.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("the client certificate's organizations are %v, want [system:masters]", client.Subject.Organization)
	}
	if serving.SerialNumber.Cmp(client.SerialNumber) == 0 {
		t.Errorf("the serving and client certificates share the serial %v", serving.SerialNumber)
	}
	for _, pair := range [][2]string{{p.ServerCert, p.ServerKey}, {p.ClientCert, p.ClientKey}} {
		if _, err := tls.LoadX509KeyPair(pair[0], pair[1]); err != nil {
			t.Errorf("%s with %s: %v", pair[0], pair[1], err)
		}
	}
	checkSAPair(t, p)
	checkKubeconfig(t, p, server)
	for _, key := range []string{p.ServerKey, p.ClientKey, p.SAKey} {
		if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", key, st.Mode(), err)
		}
	}
}

// checkSAPair checks that sa.pub is the public half of sa.key.
func checkSAPair(t *testing.T, p *PKI) {
	t.Helper()
	keyPEM, _ := pem.Decode([]byte(ReadText(p.SAKey)))
	pubPEM, _ := pem.Decode([]byte(ReadText(p.SAPub)))
	if keyPEM == nil || pubPEM == nil {
		t.Fatalf("%s or %s is not PEM", p.SAKey, p.SAPub)
	}
	key, err := x509.ParseECPrivateKey(keyPEM.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.ParsePKIXPublicKey(pubPEM.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if ec, ok := pub.(*ecdsa.PublicKey); !ok || !ec.Equal(&key.PublicKey) {
		t.Errorf("%s is not the public key of %s", p.SAPub, p.SAKey)
	}
}

// checkKubeconfig checks the admin kubeconfig as client-go reads it.
func checkKubeconfig(t *testing.T, p *PKI, server string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", p.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != server || cfg.CAFile != p.CA || cfg.CertFile != p.ClientCert || cfg.KeyFile != p.ClientKey {
		t.Errorf("the kubeconfig has server %s, CA %s, client %s / %s; want %s, %s, %s / %s",
			cfg.Host, cfg.CAFile, cfg.CertFile, cfg.KeyFile, server, p.CA, p.ClientCert, p.ClientKey)
	}
}

// TestAPIServerFlagsNameThePKI: kube-apiserver's flags give it the PKI's
// files as each is meant (its serving pair, the CA it checks clients by,
// the client pair it calls kubelet with, the service account pair), each
// flag once, and the service range whose first address the serving
// certificate holds.
func TestAPIServerFlagsNameThePKI(t *testing.T) {
	p, err := newPKI(t.TempDir(), "https://192.0.2.10:6443")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]string{}
	for _, a := range apiServerArgs(p, "/run/sriov-e2e/audit-policy.yaml", "/logs/audit.log") {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if _, dup := flags[k]; dup {
			t.Errorf("--%s given twice", k)
		}
		flags[k] = v
	}
	want := map[string]string{
		"tls-cert-file": p.ServerCert, "tls-private-key-file": p.ServerKey, "client-ca-file": p.CA,
		"kubelet-client-certificate": p.ClientCert, "kubelet-client-key": p.ClientKey,
		"service-account-key-file": p.SAPub, "service-account-signing-key-file": p.SAKey,
		"service-cluster-ip-range": serviceCIDR, "advertise-address": NodeIP,
		"audit-policy-file": "/run/sriov-e2e/audit-policy.yaml", "audit-log-path": "/logs/audit.log",
	}
	for k, v := range want {
		if flags[k] != v {
			t.Errorf("--%s=%q, want %q", k, flags[k], v)
		}
	}
}
