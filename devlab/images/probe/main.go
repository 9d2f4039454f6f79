// probe: what a pod of the lab's cluster can reach, printed one line per check for `kubectl logs`.
//
//	probe                 calls the API server through the kubernetes Service (KUBERNETES_SERVICE_HOST/
//	                      PORT, the ServiceAccount token and CA) and prints who it is
//	probe tcp HOST:PORT…  opens a TCP connection to each address and checks that it stays open
//	                      (or sends something) for 0.7 s: something answers behind the relay
//
// Every line starts with "ok " or "FAIL "; the exit code is 1 if any check failed. After the checks it
// stays up until SIGTERM when PROBE_WAIT is set (so a test can also exec into it).
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"

func apiCheck() error {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" {
		return fmt.Errorf("KUBERNETES_SERVICE_HOST is not set")
	}
	token, err := os.ReadFile(sa + "token")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(sa + "ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}}}
	body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	req, _ := http.NewRequest("POST", "https://"+net.JoinHostPort(host, port)+
		"/apis/authentication.k8s.io/v1/selfsubjectreviews", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+string(bytes.TrimSpace(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 && resp.StatusCode != 200 {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, data)
	}
	var review struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &review); err != nil {
		return err
	}
	fmt.Printf("ok api https://%s:%s as %s\n", host, port, review.Status.UserInfo.Username)
	return nil
}

func main() {
	failed := false
	if len(os.Args) > 2 && os.Args[1] == "tcp" {
		for _, addr := range os.Args[2:] {
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				fmt.Printf("FAIL tcp %s: %v\n", addr, err)
				failed = true
				continue
			}
			// a relay accepts before it reaches what is behind it: a connection closed at once
			// means nothing answers there; one held open (or sending, like a console) does
			conn.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
			if ne, ok := err.(net.Error); err != nil && !(ok && ne.Timeout()) {
				fmt.Printf("FAIL tcp %s: connected, then closed at once: %v\n", addr, err)
				failed = true
				continue
			}
			fmt.Printf("ok tcp %s\n", addr)
		}
	} else if err := apiCheck(); err != nil {
		fmt.Printf("FAIL api: %v\n", err)
		failed = true
	}
	if os.Getenv("PROBE_WAIT") != "" {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		<-sigs
	}
	if failed {
		os.Exit(1)
	}
}
