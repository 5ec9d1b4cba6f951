package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// SetRedisLogger sends go-redis's process-wide log lines (connection pool
// failures and the like) to log instead of raw lines on stderr: failures at
// WARN, the rest at debug.
func SetRedisLogger(log *zap.Logger) {
	redis.SetLogger(redisLogger{log.Named("redis")})
}

type redisLogger struct{ log *zap.Logger }

func (l redisLogger) Printf(_ context.Context, format string, args ...any) {
	detail := strings.TrimSpace(fmt.Sprintf(format, args...))
	if strings.Contains(detail, "fail") || strings.Contains(detail, "error") {
		l.log.Warn("redis client", zap.String("detail", detail))
		return
	}
	l.log.Debug("redis client", zap.String("detail", detail))
}
