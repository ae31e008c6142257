// The sealed e2e's key-broker workload (issue 21 §6), built by the test as a static binary and
// run from a local-registry image by digest on a sealed runner:
//
//	kbs_workload AUDIENCE NONCE RESOURCE    (env HS_BLOB: base64 of iv|ciphertext|tag)
//
// It makes a P-256 key, asks the agent's socket for an attestation token for AUDIENCE binding
// that key (tee_pubkey_sha256 = hex SHA-256 of its DER SubjectPublicKeyInfo), asks the key
// broker (through the same socket: the pod's network is its own loopback) for RESOURCE with the
// token and the public key, opens the envelope (ECDH-ES + HKDF-SHA256 + AES-256-GCM, kbs.h),
// decrypts HS_BLOB with the released key (AES-256-GCM) and prints "plaintext=<...>". It prints
// "token=<JWT>" on the way and "kbs status=<code> <body>" or "error: ..." when refused. Then it
// stays up a minute so that the test reads its log from a running pod.
package main

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

const socket = "/run/hyperslice/teeserver.sock"
const alg = "ECDH-ES+HKDF-SHA256+A256GCM"

func post(c *http.Client, path, auth string, body any) (int, []byte, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequest("POST", "http://localhost"+path, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

func gcmOpen(key, iv, sealed []byte) ([]byte, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	g, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return g.Open(nil, iv, sealed, nil)
}

func run() error {
	if len(os.Args) != 4 {
		return fmt.Errorf("usage: kbs_workload AUDIENCE NONCE RESOURCE")
	}
	audience, nonce, resource := os.Args[1], os.Args[2], os.Args[3]
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	binding := sha256.Sum256(der)
	status, token, err := post(c, "/v1/token", "", map[string]any{
		"audience": audience, "nonces": []string{nonce},
		"tee_pubkey_sha256": hex.EncodeToString(binding[:])})
	if err != nil || status != 200 {
		return fmt.Errorf("token: %d %s %v", status, bytes.TrimSpace(token), err)
	}
	fmt.Printf("token=%s\n", token)

	pub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	status, body, err := post(c, "/kbs/v0/resource/"+resource, "Bearer "+string(token),
		map[string]string{"publicKey": string(pub)})
	if err != nil {
		return fmt.Errorf("kbs: %v", err)
	}
	if status != 200 {
		fmt.Printf("kbs status=%d %s\n", status, bytes.TrimSpace(body))
		return nil
	}
	var env struct{ Alg, Epk, Iv, Ciphertext, Tag string }
	if err := json.Unmarshal(body, &env); err != nil || env.Alg != alg {
		return fmt.Errorf("envelope: %v (alg %q)", err, env.Alg)
	}
	block, _ := pem.Decode([]byte(env.Epk))
	if block == nil {
		return fmt.Errorf("envelope: epk is not PEM")
	}
	epk, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return err
	}
	ecEpk, ok := epk.(*ecdsa.PublicKey)
	if !ok {
		return fmt.Errorf("envelope: epk is not EC")
	}
	theirs, err := ecEpk.ECDH()
	if err != nil {
		return err
	}
	mine, err := key.ECDH()
	if err != nil {
		return err
	}
	z, err := mine.ECDH(theirs)
	if err != nil {
		return err
	}
	wrap, err := hkdf.Key(sha256.New, z, nil, alg, 32)
	if err != nil {
		return err
	}
	iv, _ := base64.StdEncoding.DecodeString(env.Iv)
	ct, _ := base64.StdEncoding.DecodeString(env.Ciphertext)
	tag, _ := base64.StdEncoding.DecodeString(env.Tag)
	modelKey, err := gcmOpen(wrap, iv, append(ct, tag...))
	if err != nil {
		return fmt.Errorf("envelope: %v", err)
	}
	blob, err := base64.StdEncoding.DecodeString(os.Getenv("HS_BLOB"))
	if err != nil || len(blob) < 12+16 {
		return fmt.Errorf("HS_BLOB: %v", err)
	}
	plain, err := gcmOpen(modelKey, blob[:12], blob[12:])
	if err != nil {
		return fmt.Errorf("blob: %v", err)
	}
	fmt.Printf("plaintext=%s\n", plain)
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Printf("error: %v\n", err)
	}
	time.Sleep(60 * time.Second)
}
