// Runs in every test file: services a failed test did not stop are stopped when the file is done.
import { afterAll } from 'vitest';
import { stopLeftoverServices } from './helpers/service.js';

afterAll(stopLeftoverServices);
