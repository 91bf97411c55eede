// The lint gate (`make lint`, and the first step of `make test`): typescript-eslint's strict and
// stylistic sets over the TypeScript of the project; prettier (.prettierrc.json) owns the layout.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', '.cache/', '.run/', 'native/', 'deploy/', 'bench/results/'] },
  js.configs.recommended,
  tseslint.configs.strict,
  tseslint.configs.stylistic,
  {
    rules: {
      // noUncheckedIndexedAccess types every index of an array as possibly undefined; the loops over
      // typed arrays index within their bounds, and `!` says so without a branch on the hot path.
      '@typescript-eslint/no-non-null-assertion': 'off',
      // `const { field: _, ...rest } = point` drops a field: the rest is what is used.
      '@typescript-eslint/no-unused-vars': ['error', { ignoreRestSiblings: true }],
    },
  },
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        Buffer: 'readonly',
        console: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        setImmediate: 'readonly',
        performance: 'readonly',
        URL: 'readonly',
        TextEncoder: 'readonly',
        TextDecoder: 'readonly',
        fetch: 'readonly',
        AbortController: 'readonly',
        AbortSignal: 'readonly',
        queueMicrotask: 'readonly',
        structuredClone: 'readonly',
        NodeJS: 'readonly',
      },
    },
  },
);
