package objstore

import "testing"

func TestURL(t *testing.T) {
	for _, c := range []struct{ storage, want string }{
		{"file:///var/weir", "file:///var/weir/orders/savepoints/sp/_metadata"},
		{"file:///var/weir/", "file:///var/weir/orders/savepoints/sp/_metadata"},
		{"s3://bucket", "s3://bucket/orders/savepoints/sp/_metadata"},
		{"s3://bucket/prefix?region=us-east-1&endpoint=http://127.0.0.1:19000", "s3://bucket/prefix/orders/savepoints/sp/_metadata?region=us-east-1&endpoint=http://127.0.0.1:19000"},
		{"mem://", "mem:///orders/savepoints/sp/_metadata"},
	} {
		if got := URL(c.storage, "orders", "savepoints/sp/_metadata"); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.storage, got, c.want)
		}
	}
}
