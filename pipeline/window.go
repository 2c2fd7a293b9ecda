package pipeline

import (
	"time"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/stream"
)

// windowKind returns the stream's kind of a window.type, 0 if none.
func windowKind(t string) stream.WindowKind {
	switch t {
	case config.WindowTumbling:
		return stream.Tumbling
	case config.WindowSliding:
		return stream.Sliding
	case config.WindowSession:
		return stream.Session
	}
	return 0
}

// windowing returns the stream.Windowing of the window step at path, and
// false (with a problem) if it has none.
func (c *compiler) windowing(path string, w *config.WindowStep) (stream.Windowing[Rec], bool) {
	kind := windowKind(w.Type)
	if kind == 0 {
		c.add(path+".type", "%q: must be tumbling, sliding or session", w.Type)
		return stream.Windowing[Rec]{}, false
	}
	ws := stream.Windowing[Rec]{Kind: kind, Size: w.Size, Slide: w.Slide, Gap: w.Gap,
		AllowedLateness: w.AllowedLateness, EmitEvery: w.EmitEvery, LateTopic: w.LateTopic}
	if w.LateTopic != "" {
		ws.LateCodec = JSONCodec{}
	}
	return ws, true
}

// rfc3339 writes t in UTC as RFC 3339, with the fraction of a second only
// if it has one ("2026-12-01T19:00:00Z", "…:00.5Z").
func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
