'use strict';
// rate-limiter.js - token bucket middleware for an HTTP server.

const { EventEmitter } = require('events');

const DEFAULTS = {
  capacity: 10,
  refillPerSecond: 5,
  keyFrom: (req) => req.socket.remoteAddress,
};

/**
 * One bucket per key; tokens refill continuously.
 */
class TokenBucket {
  constructor(capacity, refillPerSecond, now = Date.now) {
    this.capacity = capacity;
    this.refillPerSecond = refillPerSecond;
    this.tokens = capacity;
    this.now = now;
    this.updated = now();
  }

  refill() {
    const elapsed = (this.now() - this.updated) / 1000;
    this.tokens = Math.min(this.capacity, this.tokens + elapsed * this.refillPerSecond);
    this.updated = this.now();
  }

  take() {
    this.refill();
    if (this.tokens < 1) {
      return false;
    }
    this.tokens -= 1;
    return true;
  }
}

class RateLimiter extends EventEmitter {
  constructor(options = {}) {
    super();
    this.options = { ...DEFAULTS, ...options };
    this.buckets = new Map();
  }

  bucketFor(key) {
    let bucket = this.buckets.get(key);
    if (!bucket) {
      bucket = new TokenBucket(this.options.capacity, this.options.refillPerSecond);
      this.buckets.set(key, bucket);
    }
    return bucket;
  }

  middleware() {
    return (req, res, next) => {
      const key = this.options.keyFrom(req);
      if (this.bucketFor(key).take()) {
        return next();
      }
      this.emit('limited', key);
      res.statusCode = 429;
      res.end(`rate limited: ${key} {retry later}`);
    };
  }
}

function createLimiter(options) {
  return new RateLimiter(options);
}

module.exports = { createLimiter, RateLimiter, TokenBucket };
