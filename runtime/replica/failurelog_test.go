package replica

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/weir-stream/weir/control"
)

// TestFailureLogNamesARecordOnlyIfThereIsOne: the log attributes of a
// permanent failure name its record (topic, partition, offset) only when
// the failure is about one: a storage or Kafka failure logs no
// record_topic="" record_partition=0 record_offset=0.
func TestFailureLogNamesARecordOnlyIfThereIsOne(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(slog.NewTextHandler(&b, nil))
	log.Info("storage", recordAttrs(control.Position{})...)
	log.Info("record", recordAttrs(control.Position{Topic: "orders", Partition: 2, Offset: 7})...)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || strings.Contains(lines[0], "record_") {
		t.Errorf("a failure about no record logs record attributes:\n%s", b.String())
	}
	if len(lines) != 2 || !strings.Contains(lines[1], "record_topic=orders record_partition=2 record_offset=7") {
		t.Errorf("a record's failure does not name it:\n%s", b.String())
	}
}
