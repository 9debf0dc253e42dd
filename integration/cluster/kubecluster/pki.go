package kubecluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// PKI is the cluster's certificates: one CA signing the API server's
// serving certificate and one client certificate in system:masters that
// every component and the tests use (a single-node test cluster; the
// authorization of the components is not what it tests), and the service
// account signing key. Every field is a file's path.
type PKI struct {
	CA         string // ca.crt
	ServerCert string // apiserver.crt / .key
	ServerKey  string
	ClientCert string // admin.crt / .key, in system:masters
	ClientKey  string
	SAKey      string // sa.key (private) / sa.pub
	SAPub      string
	Kubeconfig string // admin.kubeconfig: the client certificate against server
}

// newPKI writes the cluster's PKI into dir, with a kubeconfig for server.
func newPKI(dir, server string) (*PKI, error) {
	p := &PKI{CA: filepath.Join(dir, "ca.crt"), ServerCert: filepath.Join(dir, "apiserver.crt"),
		ServerKey: filepath.Join(dir, "apiserver.key"), ClientCert: filepath.Join(dir, "admin.crt"),
		ClientKey: filepath.Join(dir, "admin.key"), SAKey: filepath.Join(dir, "sa.key"), SAPub: filepath.Join(dir, "sa.pub"),
		Kubeconfig: filepath.Join(dir, "admin.kubeconfig")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, caCert, err := selfSigned("sriov-e2e-ca")
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.CA, "CERTIFICATE", caCert.Raw); err != nil {
		return nil, err
	}
	serverTmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost"},
		IPAddresses: []net.IP{net.ParseIP(NodeIP), net.ParseIP("127.0.0.1"), firstServiceIP()},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := issue(serverTmpl, caKey, caCert, p.ServerCert, p.ServerKey); err != nil {
		return nil, err
	}
	clientTmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "sriov-e2e-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := issue(clientTmpl, caKey, caCert, p.ClientCert, p.ClientKey); err != nil {
		return nil, err
	}
	if err := writeSAKey(p.SAKey, p.SAPub); err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.CA}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: p.ClientCert, ClientKey: p.ClientKey}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "admin"}
	cfg.CurrentContext = "e2e"
	if err := clientcmd.WriteToFile(*cfg, p.Kubeconfig); err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	return p, nil
}

func selfSigned(cn string) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, err
}

// newSerial is a random 127-bit serial number, unique without a counter
// (RFC 5280 allows up to 20 octets).
func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// issue signs tmpl with the CA and writes the certificate and its new key.
func issue(tmpl *x509.Certificate, caKey *ecdsa.PrivateKey, ca *x509.Certificate, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return err
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("sign %s: %w", tmpl.Subject.CommonName, err)
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

// writeSAKey writes the service account signing key and its public half.
func writeSAKey(keyPath, pubPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(keyPath, key); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	return writePEM(pubPath, "PUBLIC KEY", pub)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}
