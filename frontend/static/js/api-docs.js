// The API docs page: Swagger UI (from the fastapi-offline package, served by this server).
const root = document.getElementById("swagger-ui");
window.ui = window.SwaggerUIBundle({ url: root.dataset.openapiUrl, domNode: root, deepLinking: true });
