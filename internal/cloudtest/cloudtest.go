// Package cloudtest hands tests a bucket on the emulators of the object
// stores Weir supports besides S3 — fake-gcs-server for gs:// and Azurite
// for azblob:// — started by scripts/cloud.sh (make test starts them).
package cloudtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob://
	_ "gocloud.dev/blob/gcsblob"   // gs://
)

// EnvRequire, set to 1 (as CI does), makes a test fail rather than skip
// when its emulator is not running.
const EnvRequire = "WEIR_REQUIRE_CLOUD"

// Schemes are the object-store schemes this package serves.
func Schemes() []string { return []string{"gs", "azblob"} }

// Bucket opens a fresh prefix of the emulator bucket of scheme ("gs" or
// "azblob") and returns it with its URL, which objstore.Open accepts. The
// prefix's objects are deleted when the test passes.
func Bucket(t testing.TB, scheme string) (*blob.Bucket, string) {
	t.Helper()
	urlEnv, serverEnv := "WEIR_GCS_URL", "WEIR_GCS_SERVER"
	if scheme == "azblob" {
		urlEnv, serverEnv = "WEIR_AZBLOB_URL", "WEIR_AZBLOB_SERVER"
	}
	raw := os.Getenv(urlEnv)
	if raw == "" {
		unavailable(t, urlEnv+` is not set: bash scripts/cloud.sh up && eval "$(bash scripts/cloud.sh env)", or make test`)
	}
	endpoint, err := endpointOf(scheme, raw)
	if err != nil {
		t.Fatalf("cloudtest: %s=%s: %v", urlEnv, raw, err)
	}
	if conn, err := net.DialTimeout("tcp", endpoint, 2*time.Second); err != nil {
		unavailable(t, fmt.Sprintf("%s emulator at %s does not answer (%v): bash scripts/cloud.sh up", scheme, endpoint, err))
	} else {
		_ = conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if scheme == "azblob" {
		if err := createContainer(ctx, endpoint, raw); err != nil {
			t.Fatalf("cloudtest: create the Azurite container: %v", err)
		}
	}
	prefix := testPrefix(t)
	u := raw + sep(raw) + "prefix=" + neturl.QueryEscape(prefix)
	b, err := blob.OpenBucket(ctx, u)
	if err != nil {
		t.Fatalf("cloudtest: open %s: %v", u, err)
	}
	if ok, err := b.IsAccessible(ctx); err != nil || !ok {
		_ = b.Close()
		t.Fatalf("cloudtest: %s is not accessible (accessible=%v, err=%v)", u, ok, err)
	}
	t.Logf("weir-real-%s: %s at %s, prefix %s", scheme, os.Getenv(serverEnv), endpoint, prefix)
	t.Cleanup(func() {
		if !t.Failed() {
			cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer ccancel()
			it := b.List(&blob.ListOptions{})
			for {
				o, err := it.Next(cctx)
				if err != nil {
					break
				}
				_ = b.Delete(cctx, o.Key)
			}
		}
		_ = b.Close()
	})
	return b, u
}

func sep(u string) string {
	if strings.Contains(u, "?") {
		return "&"
	}
	return "?"
}

// endpointOf returns host:port of the emulator a bucket URL points at.
func endpointOf(scheme, raw string) (string, error) {
	if scheme == "gs" {
		if h := os.Getenv("STORAGE_EMULATOR_HOST"); h != "" {
			return h, nil
		}
		return "", errors.New("STORAGE_EMULATOR_HOST is not set")
	}
	u, err := neturl.Parse(raw)
	if err != nil {
		return "", err
	}
	if d := u.Query().Get("domain"); d != "" {
		return d, nil
	}
	return "", errors.New("no domain= parameter")
}

// createContainer creates the URL's container on Azurite unless it exists.
func createContainer(ctx context.Context, endpoint, raw string) error {
	u, err := neturl.Parse(raw)
	if err != nil {
		return err
	}
	account, key := os.Getenv("AZURE_STORAGE_ACCOUNT"), os.Getenv("AZURE_STORAGE_KEY")
	cred, err := azblob.NewSharedKeyCredential(account, key)
	if err != nil {
		return err
	}
	cl, err := azblob.NewClientWithSharedKeyCredential(fmt.Sprintf("http://%s/%s", endpoint, account), cred, nil)
	if err != nil {
		return err
	}
	if _, err := cl.CreateContainer(ctx, u.Host, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		return err
	}
	return nil
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("cloudtest: %s (%s=1: the emulator tests must run)", why, EnvRequire)
	}
	t.Skipf("cloudtest: %s (set %s=1 to fail instead of skip)", why, EnvRequire)
}

func testPrefix(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > 60 {
		name = name[:60]
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatalf("cloudtest: random prefix: %v", err)
	}
	return name + "-" + hex.EncodeToString(rnd[:]) + "/"
}
