package hub

import (
	"context"
	"fmt"
	"testing"

	"github.com/hindsearch/hindsearch/clients/hub/hubtest"
)

// BenchmarkFetchThrottled fetches a 4 MB LFS file from a fake hub whose
// backend sends 4 MB/s per connection, in one stream and in parallel
// ranges: the ratio of the two is what --parallel buys against a backend
// that limits each connection (the hub's CDN does; a local mirror may
// not). Compare the sub-benchmarks' MB/s, measured side by side.
func BenchmarkFetchThrottled(b *testing.B) {
	data := blob(4<<20, 9)
	for _, parallel := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("parallel-%d", parallel), func(b *testing.B) {
			h := hubtest.New(b)
			h.Add("dataset", "d/x", "f.bin", data, true, false)
			h.Throttle = 4 << 20
			c := client(b, h, "")
			c.Parallel, c.MinPart = parallel, 256<<10
			b.SetBytes(int64(len(data)))
			for i := 0; i < b.N; i++ {
				if _, err := c.Get(context.Background(), File{Repo: "d/x", Type: Dataset, Path: "f.bin"}, b.TempDir()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
