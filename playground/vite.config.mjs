// Builds the playground into the gateway package, which serves it at /playground
// (docs/client.md#the-web-playground). `npm run build` after changing anything in src/.
import { fileURLToPath } from "node:url";

import { defineConfig } from "vite";

export default defineConfig({
  base: "/playground/",
  esbuild: { jsx: "automatic" },
  build: {
    outDir: fileURLToPath(new URL("../services/gateway/src/durachat_gateway/playground_dist", import.meta.url)),
    emptyOutDir: true,
    chunkSizeWarningLimit: 2000,
    sourcemap: false,
  },
});
