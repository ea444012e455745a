// The Go oracle of the differential tests (tests/helpers/gooracle.py builds and drives it): Go's
// own standard library answers the inputs the tests generate, so a verdict of nsqpy's Go-exact
// pieces is checked against Go 1.19 itself rather than against a hand-copied table.
//
// Requests come in batches on stdin: one request a line, "<mode> <hex> [<hex> ...]", and an
// empty line to end the batch. The answers of the whole batch follow on stdout, one line each:
// the mode's answer, or "ERR <hex of Go's error text>". A batch is read whole before any answer
// is written, so neither side ever waits on a full pipe.
//
//	s <bytes>                     the bytes as a Go string, marshalled (encoding/json): hex
//	f <8 bytes>                   the float64 of those bits (big-endian), marshalled: hex
//	d <bytes>                     unmarshalled into interface{}, then marshalled: hex
//	i <bytes>                     unmarshalled into nsqd's IDENTIFY struct, then marshalled: hex
//	r <pattern> <text> ...        regexp.Compile, then MatchString on each text: "0"/"1" a text
//	x <roots> <chain> <host>      x509: the chain's first certificate (PEM) verified for a server
//	                              named <host>, the rest of the chain as intermediates: "OK"
package main

import (
	"bufio"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"
)

// identify is upstream v1.3.0's nsqd IDENTIFY body (nsqd/protocol_v2.go identifyDataV2)
type identify struct {
	ClientID            string `json:"client_id"`
	Hostname            string `json:"hostname"`
	HeartbeatInterval   int    `json:"heartbeat_interval"`
	OutputBufferSize    int    `json:"output_buffer_size"`
	OutputBufferTimeout int    `json:"output_buffer_timeout"`
	FeatureNegotiation  bool   `json:"feature_negotiation"`
	TLSv1               bool   `json:"tls_v1"`
	Deflate             bool   `json:"deflate"`
	DeflateLevel        int    `json:"deflate_level"`
	Snappy              bool   `json:"snappy"`
	SampleRate          int32  `json:"sample_rate"`
	UserAgent           string `json:"user_agent"`
	MsgTimeout          int    `json:"msg_timeout"`
}

func marshalled(v interface{}, err error) (string, error) {
	if err != nil {
		return "", err
	}
	out, err := json.Marshal(v)
	return hex.EncodeToString(out), err
}

func matches(args [][]byte) (string, error) {
	re, err := regexp.Compile(string(args[0]))
	if err != nil {
		return "", err
	}
	var verdicts strings.Builder
	for _, text := range args[1:] {
		if re.MatchString(string(text)) {
			verdicts.WriteByte('1')
		} else {
			verdicts.WriteByte('0')
		}
	}
	return verdicts.String(), nil
}

func certificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return certs, nil
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, cert)
	}
}

func verified(args [][]byte) (string, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(args[0]) {
		return "", errors.New("no root certificate")
	}
	chain, err := certificates(args[1])
	if err != nil || len(chain) == 0 {
		return "", fmt.Errorf("no certificate to verify: %v", err)
	}
	intermediates := x509.NewCertPool()
	for _, cert := range chain[1:] {
		intermediates.AddCert(cert)
	}
	_, err = chain[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: intermediates, DNSName: string(args[2]),
	})
	return "OK", err
}

func answer(mode string, args [][]byte) (string, error) {
	switch {
	case mode == "s" && len(args) == 1:
		return marshalled(string(args[0]), nil)
	case mode == "f" && len(args) == 1:
		if len(args[0]) != 8 {
			return "", errors.New("not 8 bytes")
		}
		return marshalled(math.Float64frombits(binary.BigEndian.Uint64(args[0])), nil)
	case mode == "d" && len(args) == 1:
		var v interface{}
		err := json.Unmarshal(args[0], &v)
		return marshalled(v, err)
	case mode == "i" && len(args) == 1:
		var v identify
		err := json.Unmarshal(args[0], &v)
		return marshalled(v, err)
	case mode == "r" && len(args) >= 1:
		return matches(args)
	case mode == "x" && len(args) == 3:
		return verified(args)
	}
	return "", fmt.Errorf("bad request %q with %d arguments", mode, len(args))
}

func reply(line string) string {
	fields := strings.Split(line, " ")
	args := make([][]byte, 0, len(fields)-1)
	for _, field := range fields[1:] {
		arg, err := hex.DecodeString(field)
		if err != nil {
			return "ERR " + hex.EncodeToString([]byte(err.Error()))
		}
		args = append(args, arg)
	}
	got, err := answer(fields[0], args)
	if err != nil {
		return "ERR " + hex.EncodeToString([]byte(err.Error()))
	}
	return got
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	var batch []string
	for in.Scan() {
		if line := in.Text(); line != "" {
			batch = append(batch, line)
			continue
		}
		for _, line := range batch {
			fmt.Fprintln(out, reply(line))
		}
		batch = batch[:0]
		if out.Flush() != nil {
			return
		}
	}
}
