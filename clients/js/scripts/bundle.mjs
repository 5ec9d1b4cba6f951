// Bundles the demo page's script with the client into one file that
// internal/demo embeds (committed, so `go run ./cmd/gomsg dev` needs only Go).
import { build } from "esbuild";

await build({
  entryPoints: ["demo/demo.ts"],
  bundle: true,
  format: "iife",
  target: "es2022",
  minify: true,
  legalComments: "none",
  charset: "utf8",
  outfile: "../../internal/demo/static/gomsg-demo.js",
  logLevel: "warning",
});
