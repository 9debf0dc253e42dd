// Command vf-device-plugin is the cluster e2e's device plugin: it
// advertises SR-IOV VFs to kubelet through the device-plugin API (v1beta1),
// one extended resource per -resource flag, the way the SR-IOV network
// device plugin does for a resource pool. It stands in for that plugin,
// which the module proxy here does not serve.
//
//	vf-device-plugin -sysfs-root /sys \
//	    -resource sriov-stable-cni.io/ibvf=0000:18:00.2,0000:18:00.3
//
// Device IDs are the VFs' PCI addresses, as kubelet's PodResources API then
// reports them to Multus (which puts the one allocated into deviceID and
// pciBusID). Allocate answers with the environment variable
// PCIDEVICE_<RESOURCE> listing the allocated VFs and writes each VF's Device
// Info file (spec 1.1.0) under /var/run/k8s.cni.cncf.io/devinfo/dp, which
// Multus copies into the attachment's CNIDeviceInfoFile and, after the
// chain's ADD, into the device-info of the pod's network-status. The file
// holds the VF's pci-address alone, as a device plugin that knows nothing of
// RDMA writes it: its rdma-device and pf-pci-address come from
// sriov-stable-cni's completion of that file (the cluster e2e checks them). A VF whose sysfs
// directory is gone is reported Unhealthy. When kubelet restarts it removes
// every plugin socket; the plugin then serves and registers again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	dp "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// resourceFlags collects -resource NAME=VF,VF,... values.
type resourceFlags map[string][]string

func (r resourceFlags) String() string { return fmt.Sprint(map[string][]string(r)) }

func (r resourceFlags) Set(s string) error {
	name, list, ok := strings.Cut(s, "=")
	if !ok || name == "" || list == "" {
		return fmt.Errorf("%q is not NAME=PCI[,PCI...]", s)
	}
	if !strings.Contains(name, "/") {
		return fmt.Errorf("resource name %q has no domain (e.g. example.com/vf)", name)
	}
	if _, dup := r[name]; dup {
		return fmt.Errorf("resource %s given twice", name)
	}
	r[name] = strings.Split(list, ",")
	return nil
}

func main() {
	resources := resourceFlags{}
	sysfsRoot := flag.String("sysfs-root", "/sys", "sysfs to read the VFs from")
	pluginDir := flag.String("plugin-dir", dp.DevicePluginPath, "kubelet's device-plugin directory (its registration socket and ours)")
	healthEvery := flag.Duration("health-interval", 5*time.Second, "how often each VF's presence is checked")
	flag.Var(resources, "resource", "NAME=PCI[,PCI...]: an extended resource and its VFs (repeatable)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if len(resources) == 0 {
		log.Error("no -resource given")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var wg sync.WaitGroup
	for name, vfs := range resources {
		p := &plugin{name: name, vfs: vfs, sysfs: *sysfsRoot, dir: *pluginDir, healthEvery: *healthEvery,
			log: log.With("resource", name), changed: make(chan struct{}, 1)}
		wg.Go(func() { p.run(ctx) })
	}
	wg.Wait()
}

// plugin serves one resource.
type plugin struct {
	dp.UnimplementedDevicePluginServer
	name        string
	vfs         []string
	sysfs       string
	dir         string
	healthEvery time.Duration
	log         *slog.Logger

	mu      sync.Mutex
	health  map[string]string
	changed chan struct{}
}

// socket is the plugin's socket file name under the plugin dir.
func (p *plugin) socket() string {
	return "sriov-stable-e2e-" + strings.NewReplacer("/", "-", ".", "-").Replace(p.name) + ".sock"
}

// run serves and registers until ctx ends, again whenever kubelet has
// removed the socket (it does on every start).
func (p *plugin) run(ctx context.Context) {
	go p.watchHealth(ctx)
	for ctx.Err() == nil {
		err := p.serveOnce(ctx)
		if err == nil {
			continue
		}
		// kubelet not (yet) listening: soon again, pods wait for us.
		p.log.Error("serving", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// serveOnce listens, registers with kubelet and returns when the socket
// file is gone or ctx ends.
func (p *plugin) serveOnce(ctx context.Context) error {
	path := filepath.Join(p.dir, p.socket())
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	dp.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	if err := p.register(ctx); err != nil {
		return err
	}
	p.log.Info("registered with kubelet", "socket", path, "vfs", len(p.vfs))
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = os.Remove(path)
			return nil
		case <-tick.C:
			if _, err := os.Stat(path); err != nil {
				p.log.Info("socket removed (kubelet restarted?): serving again", "socket", path)
				return nil
			}
		}
	}
}

func (p *plugin) register(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.dir, filepath.Base(dp.KubeletSocket)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = dp.NewRegistrationClient(conn).Register(rctx, &dp.RegisterRequest{
		Version: dp.Version, Endpoint: p.socket(), ResourceName: p.name,
		Options: &dp.DevicePluginOptions{GetPreferredAllocationAvailable: false},
	})
	if err != nil {
		return fmt.Errorf("register %s with kubelet: %w", p.name, err)
	}
	return nil
}

// watchHealth marks a VF Unhealthy while its sysfs directory is missing.
func (p *plugin) watchHealth(ctx context.Context) {
	for {
		health := make(map[string]string, len(p.vfs))
		for _, vf := range p.vfs {
			health[vf] = dp.Healthy
			if _, err := os.Stat(filepath.Join(p.sysfs, "bus", "pci", "devices", vf)); err != nil {
				health[vf] = dp.Unhealthy
			}
		}
		p.mu.Lock()
		differs := fmt.Sprint(health) != fmt.Sprint(p.health)
		p.health = health
		p.mu.Unlock()
		if differs {
			select {
			case p.changed <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.healthEvery):
		}
	}
}

func (p *plugin) devices() []*dp.Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*dp.Device, 0, len(p.vfs))
	for _, vf := range p.vfs {
		h := p.health[vf]
		if h == "" {
			h = dp.Healthy
		}
		out = append(out, &dp.Device{ID: vf, Health: h})
	}
	return out
}

// GetDevicePluginOptions implements dp.DevicePluginServer.
func (p *plugin) GetDevicePluginOptions(context.Context, *dp.Empty) (*dp.DevicePluginOptions, error) {
	return &dp.DevicePluginOptions{}, nil
}

// ListAndWatch sends the VFs, then again whenever their health changes.
func (p *plugin) ListAndWatch(_ *dp.Empty, stream grpc.ServerStreamingServer[dp.ListAndWatchResponse]) error {
	for {
		if err := stream.Send(&dp.ListAndWatchResponse{Devices: p.devices()}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-p.changed:
		}
	}
}

// Allocate hands the VFs to a container: their addresses in PCIDEVICE_<RESOURCE>
// and a Device Info file per VF for Multus.
func (p *plugin) Allocate(_ context.Context, req *dp.AllocateRequest) (*dp.AllocateResponse, error) {
	resp := &dp.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		for _, id := range c.DevicesIds {
			if !slices.Contains(p.vfs, id) {
				return nil, fmt.Errorf("device %s is not a VF of %s", id, p.name)
			}
			// A VF allocated before has its file still there (nothing
			// removes it when a pod ends); saving refuses to overwrite.
			if err := nadutils.CleanDeviceInfoForDP(p.name, id); err != nil {
				return nil, fmt.Errorf("device info of %s: %w", id, err)
			}
			if err := nadutils.SaveDeviceInfoForDP(p.name, id, deviceInfo(id)); err != nil {
				return nil, fmt.Errorf("device info of %s: %w", id, err)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &dp.ContainerAllocateResponse{
			Envs: map[string]string{p.envName(): strings.Join(c.DevicesIds, ",")},
		})
		p.log.Info("allocated", "vfs", c.DevicesIds)
	}
	return resp, nil
}

// envName is PCIDEVICE_ and the resource name in upper case with / and .
// as _, the SR-IOV network device plugin's variable.
func (p *plugin) envName() string {
	return "PCIDEVICE_" + strings.ToUpper(strings.NewReplacer("/", "_", ".", "_", "-", "_").Replace(p.name))
}

// deviceInfo describes a VF for the Device Info spec by its PCI address
// only: no rdma-device, no pf-pci-address (the plugin under test fills
// them in).
func deviceInfo(vf string) *nadv1.DeviceInfo {
	return &nadv1.DeviceInfo{Type: nadv1.DeviceInfoTypePCI, Version: nadv1.DeviceInfoVersion, Pci: &nadv1.PciDevice{PciAddress: vf}}
}

// GetPreferredAllocation is not offered (GetPreferredAllocationAvailable false).
func (p *plugin) GetPreferredAllocation(context.Context, *dp.PreferredAllocationRequest) (*dp.PreferredAllocationResponse, error) {
	return &dp.PreferredAllocationResponse{}, nil
}

// PreStartContainer is not requested in the options.
func (p *plugin) PreStartContainer(context.Context, *dp.PreStartContainerRequest) (*dp.PreStartContainerResponse, error) {
	return &dp.PreStartContainerResponse{}, nil
}
