package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// node is one nats-server of the cluster, run as a child process of this
// program (`fleet node`, runNode) so that it can be killed with SIGKILL
// like a crashed server: no leader steps down first, the others elect.
type node struct {
	name     string
	index    int
	mqttPort int
	monPort  int
	dir      string // the cluster's directory (stores and logs under it)
	n, base  int
	self     string // this program, run again as the node

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// cluster is three nodes joined by routes, each with JetStream (which the
// MQTT listener needs: sessions and QoS 1 messages live in streams).
type cluster struct {
	nodes []*node
}

// newCluster lays out n nodes from basePort: client port basePort+10i,
// route port +1, MQTT port +2, monitoring port +3.
func newCluster(self, dir string, n, basePort int) *cluster {
	c := &cluster{}
	for i := range n {
		p := basePort + 10*i
		c.nodes = append(c.nodes, &node{
			name: fmt.Sprintf("n%d", i+1), index: i,
			mqttPort: p + 2, monPort: p + 3,
			dir: dir, n: n, base: basePort, self: self,
		})
	}
	return c
}

// nodeOptions are the options of node i of n (the same at every start, so
// that a restarted node finds its store).
func nodeOptions(dir string, i, n, basePort int) *server.Options {
	var routes []*url.URL
	for j := range n {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", basePort+10*j+1)})
	}
	name := fmt.Sprintf("n%d", i+1)
	p := basePort + 10*i
	return &server.Options{
		ServerName: name,
		Host:       "127.0.0.1",
		Port:       p,
		HTTPHost:   "127.0.0.1",
		HTTPPort:   p + 3,
		NoSigs:     true,
		Logtime:    true,
		LogFile:    filepath.Join(dir, name+".log"),
		JetStream:  true,
		StoreDir:   filepath.Join(dir, name),
		Cluster:    server.ClusterOpts{Name: "fleet", Host: "127.0.0.1", Port: p + 1},
		Routes:     routes,
		MQTT:       server.MQTTOpts{Host: "127.0.0.1", Port: p + 2},
	}
}

// runNode is `fleet node DIR I N BASEPORT`: it runs node I and prints
// "ready" once the node takes connections, then runs until SIGTERM (a
// clean stop) or SIGKILL.
func runNode(args []string) int {
	if len(args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: fleet node DIR I N BASEPORT")
		return 2
	}
	var i, n, base int
	for k, v := range []*int{&i, &n, &base} {
		x, err := strconv.Atoi(args[k+1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleet node:", err)
			return 2
		}
		*v = x
	}
	srv, err := server.NewServer(nodeOptions(args[0], i, n, base))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet node:", err)
		return 2
	}
	srv.ConfigureLogger()
	srv.Start()
	if !srv.ReadyForConnections(20 * time.Second) {
		fmt.Fprintln(os.Stderr, "fleet node: not ready for connections within 20s")
		return 2
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	srv.Shutdown()
	srv.WaitForShutdown()
	return 0
}

func (n *node) mqttURL() string { return fmt.Sprintf("tcp://127.0.0.1:%d", n.mqttPort) }

// start runs the node and waits until it takes connections.
func (n *node) start() error {
	cmd := exec.Command(n.self, "node", n.dir, strconv.Itoa(n.index), strconv.Itoa(n.n), strconv.Itoa(n.base))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	done := make(chan struct{})
	ready := make(chan bool, 1)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		said := false
		for sc.Scan() {
			if !said && sc.Text() == "ready" {
				said = true
				ready <- true
			}
		}
		if !said {
			ready <- false
		}
		cmd.Wait()
	}()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	select {
	case ok := <-ready:
		if ok {
			return nil
		}
		return fmt.Errorf("node %s exited before it was ready", n.name)
	case <-time.After(30 * time.Second):
		n.kill()
		return fmt.Errorf("node %s: not ready within 30s", n.name)
	}
}

// kill ends the node with SIGKILL and waits for it to be gone.
func (n *node) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		<-done
	}
}

// mqttClients lists the client ids of the MQTT connections the node holds
// whose id starts with prefix (nil while it is down), from its /connz.
func (n *node) mqttClients(prefix string) []string {
	n.mu.Lock()
	up := n.cmd != nil
	n.mu.Unlock()
	if !up {
		return nil
	}
	resp, err := httpClient.Get(fmt.Sprintf("http://127.0.0.1:%d/connz?limit=10000", n.monPort))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var cz server.Connz
	if err := json.NewDecoder(resp.Body).Decode(&cz); err != nil {
		return nil
	}
	var ids []string
	for _, ci := range cz.Conns {
		if strings.HasPrefix(ci.MQTTClient, prefix) {
			ids = append(ids, ci.MQTTClient)
		}
	}
	return ids
}

func (c *cluster) start() error {
	errs := make(chan error, len(c.nodes))
	for _, n := range c.nodes {
		go func() { errs <- n.start() }()
	}
	var first error
	for range c.nodes {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (c *cluster) stop() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(n.kill)
	}
	wg.Wait()
}
