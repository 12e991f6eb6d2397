export * from './components';
export * from './shared';
export * from './utils';
