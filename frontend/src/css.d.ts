// Stylesheets are bundled as text (build.mjs: loader "text") and injected by style.ts.
declare module "*.css" {
  const text: string;
  export default text;
}
