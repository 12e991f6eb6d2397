export * from './kubernetes';
