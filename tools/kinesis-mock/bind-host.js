// Preloaded with `node -r ./bind-host.js main.js`: kinesis-mock hard-codes its listen address to 0.0.0.0
// (all interfaces) and has no setting for it; this makes every server it opens listen on
// KINESIS_MOCK_HOST (default 127.0.0.1) instead, without patching the installed package.
"use strict";
const net = require("net");
const host = process.env.KINESIS_MOCK_HOST || "127.0.0.1";
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    // listen(port[, host][, backlog][, callback]): replace a missing or wildcard host
    if (args.length === 1 || typeof args[1] === "function") {
      args.splice(1, 0, host);
    } else if (args[1] === "0.0.0.0" || args[1] === "::") {
      args[1] = host;
    }
  } else if (args[0] && typeof args[0] === "object" && !args[0].path) {
    const options = { ...args[0] };
    if (!options.host || options.host === "0.0.0.0" || options.host === "::") options.host = host;
    args[0] = options;
  }
  return listen.apply(this, args);
};
