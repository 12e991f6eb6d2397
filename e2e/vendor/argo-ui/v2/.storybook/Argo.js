import {create} from '@storybook/theming';

export default create({
    base: 'light',
    brandTitle: 'Argo UX',
    fontBase: '"Heebo", sans-serif',
    brandUrl: 'https://github.com/argoproj/argo-ui',
    brandImage: 'https://raw.githubusercontent.com/cncf/artwork/master/projects/argo/horizontal/color/argo-horizontal-color.png',
});
