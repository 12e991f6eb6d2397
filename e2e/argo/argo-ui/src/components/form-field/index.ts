export * from './form-field';
