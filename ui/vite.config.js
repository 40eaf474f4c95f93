// Vite builds the UI into dist/, which the agent embeds (see ui.go) and
// serves at /ui/. JSX is compiled for Preact by Vite's own transform (oxc), so no plugin is
// needed.
import { defineConfig } from 'vite';

export default defineConfig({
  base: '/ui/',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // One small bundle; no inline assets (the agent's CSP allows none).
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
  },
  test: { environment: 'node' },
});
