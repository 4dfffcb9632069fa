package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync"
)

// Bounds of the per-Tokenizer piece cache.
const (
	cacheShards = 16
	// cacheShardWords is how many pieces one shard holds before it is
	// emptied and refilled.
	cacheShardWords = 4096
	// cacheMaxPiece is the longest piece (bytes) worth caching.
	cacheMaxPiece = 64
)

// pieceCache maps a piece's bytes to its ids. It is bounded (at most
// cacheShards*cacheShardWords pieces: a full shard is emptied) and safe for
// concurrent use.
type pieceCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func newPieceCache() *pieceCache {
	c := &pieceCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]int32)
	}
	return c
}

func (c *pieceCache) shard(piece string) *cacheShard {
	return &c.shards[maphash.String(c.seed, piece)%cacheShards]
}

// get appends the cached ids of piece to dst; ok is false when absent.
func (c *pieceCache) get(dst []int, piece string) ([]int, bool) {
	s := c.shard(piece)
	s.mu.RLock()
	ids, ok := s.m[piece]
	if ok {
		for _, id := range ids {
			dst = append(dst, int(id))
		}
	}
	s.mu.RUnlock()
	return dst, ok
}

// put records the ids of piece.
func (c *pieceCache) put(piece string, ids []int) {
	v := make([]int32, len(ids))
	for i, id := range ids {
		v[i] = int32(id)
	}
	s := c.shard(piece)
	s.mu.Lock()
	if len(s.m) >= cacheShardWords {
		clear(s.m)
	}
	s.m[strings.Clone(piece)] = v // not a slice of the caller's text
	s.mu.Unlock()
}
