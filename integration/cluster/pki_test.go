//go:build clustere2e

package cluster

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

// pki is the cluster's certificates: one CA signing the API server's
// serving certificate and one client certificate in system:masters that
// every component and the tests use (a single-node test cluster; the
// authorization of the components is not what it tests), and the service
// account signing key.
type pki struct {
	dir        string
	CA         string // ca.crt
	ServerCert string // apiserver.crt / .key
	ServerKey  string
	SAKey      string // sa.key (private) / sa.pub
	SAPub      string
	Kubeconfig string // admin.kubeconfig
}

func newPKI(dir, server string) (*pki, error) {
	p := &pki{dir: dir, CA: filepath.Join(dir, "ca.crt"), ServerCert: filepath.Join(dir, "apiserver.crt"),
		ServerKey: filepath.Join(dir, "apiserver.key"), SAKey: filepath.Join(dir, "sa.key"), SAPub: filepath.Join(dir, "sa.pub"),
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
		IPAddresses: []net.IP{net.ParseIP(nodeIP), net.ParseIP("127.0.0.1"), firstServiceIP()},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := issue(serverTmpl, caKey, caCert, p.ServerCert, p.ServerKey); err != nil {
		return nil, err
	}
	clientCert, clientKey := filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key")
	clientTmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "sriov-e2e-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := issue(clientTmpl, caKey, caCert, clientCert, clientKey); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.SAKey, saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.SAPub, "PUBLIC KEY", pub); err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.CA}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: clientCert, ClientKey: clientKey}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "admin"}
	cfg.CurrentContext = "e2e"
	if err := clientcmd.WriteToFile(*cfg, p.Kubeconfig); err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	return p, nil
}

// firstServiceIP is the kubernetes Service's ClusterIP: the first address
// of the service range.
func firstServiceIP() net.IP {
	_, n, _ := net.ParseCIDR(serviceCIDR)
	ip := n.IP.To4()
	return net.IPv4(ip[0], ip[1], ip[2], ip[3]+1)
}

func selfSigned(cn string) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
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

var serial int64 = 1

// issue signs tmpl with the CA and writes the certificate and its new key.
func issue(tmpl *x509.Certificate, caKey *ecdsa.PrivateKey, ca *x509.Certificate, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
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
