// Runs in every test file: services and gateways a failed test did not stop are stopped when the file is done.
import { afterAll } from 'vitest';
import { stopLeftoverGateways } from '../support/gateway.js';
import { stopLeftoverServices } from './helpers/service.js';

afterAll(async () => {
  await Promise.all([stopLeftoverServices(), stopLeftoverGateways()]);
});
